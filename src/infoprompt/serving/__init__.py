"""Serve saved adapters over HTTP: one copy of each frozen encoder shared by every adapter on it.

``infoprompt serve`` is the command; :func:`infoprompt.serving.app.create_app` builds the ASGI app for embedding.
Needs the ``serve`` extra (FastAPI, uvicorn, prometheus-client).
"""
