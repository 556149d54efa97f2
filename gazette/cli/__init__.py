"""The `gazette` command line (journals, broker serve, local up, demo). The top layer: may import all."""
