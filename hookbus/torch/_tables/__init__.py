"""One table per model layout: where each value of the names vocabulary lives.

Each module defines one :class:`~hookbus.torch._architecture.Architecture`;
:mod:`hookbus.torch._table_detection` lists them in the order they are tried.
"""
