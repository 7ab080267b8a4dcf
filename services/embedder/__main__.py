from services.embedder.app import create_app
from shared.serve import serve
from shared.settings import CommonSettings

if __name__ == "__main__":
    settings = CommonSettings()
    serve(create_app(settings), settings, port=settings.embedder_port)
