"""REST API v1 views, one module per resource; api/urls.py routes them."""
