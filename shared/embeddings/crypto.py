"""Encryption at rest of users' provider API keys (Fernet: AES-128-CBC + HMAC-SHA256).

The key is ``ENGRAM_SECRET_KEY`` (a Fernet key, or any passphrase, which is
hashed into one); unset, a key is generated once into ``<data_dir>/secret.key``
(mode 0600) and reused by every process sharing that directory.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
from functools import lru_cache
from pathlib import Path

from cryptography.fernet import Fernet, InvalidToken

from shared.embeddings.settings import EmbeddingSettings
from shared.errors import ConfigError

KEY_FILE = "secret.key"


def _fernet_key(secret: str) -> bytes:
    raw = secret.strip().encode()
    try:
        if len(base64.urlsafe_b64decode(raw)) == 32:
            return raw
    except ValueError:
        pass
    return base64.urlsafe_b64encode(hashlib.sha256(raw).digest())


def _key_from_file(data_dir: Path) -> bytes:
    path = data_dir / KEY_FILE
    if not path.exists():
        data_dir.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            pass  # another process made it first: use theirs
        else:
            with os.fdopen(fd, "wb") as f:
                f.write(Fernet.generate_key())
    key = path.read_bytes().strip()
    if not key:
        raise ConfigError(f"{path} is empty; delete it or set ENGRAM_SECRET_KEY")
    return key


@lru_cache(maxsize=8)
def _fernet(key: bytes) -> Fernet:
    return Fernet(key)


def cipher(settings: EmbeddingSettings) -> Fernet:
    if settings.secret_key is not None:
        return _fernet(_fernet_key(settings.secret_key.get_secret_value()))
    return _fernet(_key_from_file(settings.data_dir))


def signing_key(settings: EmbeddingSettings, purpose: str) -> bytes:
    """A key for signing ``purpose``'s tokens (e.g. the browser's sessions), derived
    from the same secret, so every process sharing it verifies what another signed."""
    if settings.secret_key is not None:
        material = _fernet_key(settings.secret_key.get_secret_value())
    else:
        material = _key_from_file(settings.data_dir)
    return hmac.new(material, purpose.encode(), hashlib.sha256).digest()


def encrypt(settings: EmbeddingSettings, plaintext: str) -> bytes:
    return cipher(settings).encrypt(plaintext.encode())


def decrypt(settings: EmbeddingSettings, token: bytes) -> str:
    try:
        return cipher(settings).decrypt(token).decode()
    except InvalidToken as exc:
        raise ConfigError(
            "a stored API key cannot be decrypted: ENGRAM_SECRET_KEY (or "
            f"{settings.data_dir / KEY_FILE}) is not the key it was stored with"
        ) from exc
