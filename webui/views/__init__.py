"""Console pages, one module per resource; webui/urls.py routes them."""
