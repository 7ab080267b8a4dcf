from shared.db import connect
from shared.migrate import load_migrations, migrate


async def test_migrations_run_twice_without_change(infra):
    conn = await connect(infra.database_url, codecs=False)
    try:
        assert await migrate(conn, embedding_dim=384) == []
        versions = [
            r["version"]
            for r in await conn.fetch("SELECT version FROM schema_migrations ORDER BY version")
        ]
        assert versions == [m.version for m in load_migrations()]
    finally:
        await conn.close()


async def test_a_different_vector_dimension_is_refused(infra):
    from shared.errors import ConfigError

    conn = await connect(infra.database_url, codecs=False)
    try:
        try:
            await migrate(conn, embedding_dim=768)
        except ConfigError as exc:
            assert "384" in str(exc)
        else:
            raise AssertionError("a changed dimension must be refused")
    finally:
        await conn.close()
