"""``python -m ecolaunch`` runs the command-line interface."""

from ecolaunch.cli.main import main

if __name__ == "__main__":
    main()
