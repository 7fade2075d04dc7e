"""The reference letagents room server: store, presence rules, name allocation, routes."""
