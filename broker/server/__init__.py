"""The only package that knows about sockets: listeners, connections, dispatch, metrics."""
