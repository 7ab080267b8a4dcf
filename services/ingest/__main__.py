from services.ingest.app import create_app
from services.ingest.settings import IngestSettings
from shared.serve import serve

if __name__ == "__main__":
    settings = IngestSettings()
    serve(create_app(settings), settings, port=settings.ingest_port)
