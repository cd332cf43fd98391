"""`python -m captioning attention=dot ...`: the training command of an installed copy."""

from .cli import main

main()
