"""Only for the ``Home-page`` metadata field, which pyproject.toml cannot set.

pip show before 23.3 reads the home page from that field alone (newer pips fall back
to ``[project.urls] Homepage``); everything else is in pyproject.toml.
"""

from setuptools import setup

setup(url="https://github.com/hookbus/hookbus")
