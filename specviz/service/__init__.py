"""The server's services to every session: the one store of loaded model pairs (pairs)."""
