"""Language-model settings, shared by every service that calls a chat model."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, SecretStr

from shared.settings import CommonSettings

SchemaFormat = Literal["off", "json_schema", "json_object"]


class LLMSettings(CommonSettings):
    """An OpenAI-compatible chat-completions endpoint (OpenAI, Ollama /v1, llama.cpp, vLLM).

    With no ``llm_base_url`` or no ``llm_model`` the offline extractor is used."""

    llm_base_url: str | None = Field(
        default=None, description="e.g. https://api.openai.com/v1 or http://localhost:11434/v1"
    )
    llm_model: str | None = Field(default=None, description="model name sent to the endpoint")
    llm_api_key: SecretStr | None = Field(default=None, description="Bearer key, if any")
    llm_timeout_s: float = Field(default=60.0, description="per request")
    llm_max_retries: int = Field(default=3, description="retries on timeouts, 429 and 5xx")
    llm_invalid_retries: int = Field(
        default=2, description="times to ask again when the output breaks its schema"
    )
    llm_concurrency: int = Field(default=4, description="requests in flight per process")
    llm_deadline_s: float = Field(
        default=150.0, description="one call to the model, its retries included (shared.guard)"
    )
    llm_inline_s: float = Field(
        default=60.0,
        description="a call not answered by then goes on out of line and the episode is "
        "summarised offline (asked of the model again later); calls meanwhile fail at once",
    )
    llm_json_mode: bool = Field(
        default=True, description="send response_format json_object (off for servers without it)"
    )
    llm_json_schema: SchemaFormat = Field(
        default="off",
        description="send the job's JSON schema so the server constrains decoding to it: "
        "'json_schema' as OpenAI does (response_format type json_schema: OpenAI, vLLM, "
        "Ollama, LM Studio, llama.cpp's llama-server), 'json_object' inside the json_object "
        "format (llama-cpp-python's server, llama-server), 'off': json_object only",
    )
    llm_max_tokens: int | None = Field(
        default=None, description="max_tokens sent with each request (unset: the server's)"
    )

    @property
    def llm_configured(self) -> bool:
        return bool(self.llm_base_url and self.llm_model)
