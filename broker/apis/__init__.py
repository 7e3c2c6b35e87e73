"""One thin module per API family: decode -> domain objects -> encode.

Each module registers its handlers with `api(...)`; `registry.API_HANDLERS` lists them all.
"""
