def run(*a, **k): return None
