"""`ket serve`: the deployment's functions over HTTP.

What a workspace needs to write its authenticator is here, without the server's dependencies::

    from ket.serve import AuthRequest, Principal

    async def authenticate(request: AuthRequest) -> Principal | None:
        if request.bearer_token() == os.environ["ERP_API_TOKEN"]:
            return Principal(subject="api", permissions={"call:*"})
        return None

The server itself (Starlette on uvicorn) is `ket.serve.app.create_app`.
"""

from ket.serve.principal import AuthRequest, Principal

__all__ = ["AuthRequest", "Principal"]
