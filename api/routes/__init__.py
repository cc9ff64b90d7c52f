"""The API's routers, one module per area; routes only translate between HTTP and services."""
