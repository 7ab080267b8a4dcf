from services.query.app import create_app
from services.query.settings import QuerySettings
from shared.serve import serve

if __name__ == "__main__":
    settings = QuerySettings()
    serve(create_app(settings), settings, port=settings.query_port)
