"""The observer pattern: a temperature sensor and the objects that watch it.

Shows:
* events as notifications: the sensor calls ``bus.emit("temperature", self, celsius)``
  and knows nothing about who listens;
* a plain function as an observer (``bus.on``), and hook classes whose methods are
  marked with ``@hookbus.listens`` (``bus.subscribe``), ordered by priority;
* ``target=``: an observer that follows one sensor among several;
* ``weak=True``: a popup window observes while it is open, and once the program
  drops it, it unsubscribes itself, with no ``remove()`` call anywhere;
* removing a whole subscription with one handle.

Run it: ``python examples/observer.py``
"""

from __future__ import annotations

import gc
from typing import List

import hookbus

bus = hookbus.EventBus("home")


class Sensor:
    """Publishes every reading; has no idea who is listening."""

    def __init__(self, room: str) -> None:
        self.room = room

    def read(self, celsius: float) -> None:
        bus.emit("temperature", self, celsius)


class Thermostat:
    """Switches the heating of one room; runs before the displays (priority HIGH)."""

    hook_priority = "HIGH"

    def __init__(self, setpoint: float) -> None:
        self.setpoint = setpoint
        self.heating = False

    @hookbus.listens("temperature")
    def regulate(self, sensor: Sensor, celsius: float) -> None:
        self.heating = celsius < self.setpoint


class Display:
    """Shows every reading of every sensor."""

    def __init__(self, log: List[str]) -> None:
        self.log = log

    @hookbus.listens("temperature")
    def show(self, sensor: Sensor, celsius: float) -> None:
        self.log.append(f"display: {sensor.room} {celsius:.1f} C")


class Popup:
    """A window that shows readings while it exists: subscribed weakly."""

    def __init__(self, log: List[str]) -> None:
        self.log = log

    def __call__(self, sensor: Sensor, celsius: float) -> None:  # a callable object
        self.log.append(f"popup: {sensor.room} {celsius:.1f} C")


def main() -> None:
    log: List[str] = []
    kitchen, garage = Sensor("kitchen"), Sensor("garage")

    thermostat = Thermostat(setpoint=19.0)
    bus.subscribe(thermostat, target=kitchen)  # only the kitchen sensor drives it
    display = bus.subscribe(Display(log))

    def frost_warning(sensor: Sensor, celsius: float) -> None:
        if celsius < 0:
            log.append(f"warning: frost in the {sensor.room}")

    bus.on("temperature", frost_warning, priority="LOW")  # after the display

    popup = Popup(log)
    bus.on("temperature", popup, weak=True)

    kitchen.read(18.5)
    garage.read(-2.0)
    assert thermostat.heating  # the kitchen is below 19 C; the garage was ignored
    assert log == [
        "display: kitchen 18.5 C",
        "popup: kitchen 18.5 C",
        "display: garage -2.0 C",
        "popup: garage -2.0 C",
        "warning: frost in the garage",
    ], log

    # Closing the popup is just dropping it: its weak hook goes with it.
    del popup
    gc.collect()
    log.clear()
    kitchen.read(21.0)
    assert not thermostat.heating
    assert log == ["display: kitchen 21.0 C"], log

    # One handle removes every hook of a subscription.
    display.remove()
    log.clear()
    garage.read(-5.0)
    assert log == ["warning: frost in the garage"], log

    for handle in bus.hooks("temperature"):
        print("still listening:", handle)
    print("observer example: ok")


if __name__ == "__main__":
    main()
