"""The dashboard (``--http``): a read-only page, its JSON API and live events, on the coordinator's loop.

`app` routes requests and checks access, `feed` keeps each group's timeline and pushes change events,
`openapi` describes the API; the page itself is package data under ``static/``.
"""
