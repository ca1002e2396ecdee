"""Request and response models of the proxy (they also make its OpenAPI description).

Requests follow the OpenAI API; fields we cannot honour (tools, images, n > 1, logprobs) are
refused with a 400 that says so, fields that do not matter here (penalties, ``user``) are
accepted and ignored. The OpenAI ``user`` field is **never** used as an identity or a path:
the user comes from the API key (see :mod:`server.config`).

SkillDesk's own per-request options ride in ``skilldesk`` (``extra_body`` in the openai client):
``{"skilldesk": {"learn": false}}`` turns background learning off for this turn.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator


class _Loose(BaseModel):
    model_config = ConfigDict(extra="ignore")


# --- chat ---------------------------------------------------------------------------------------
class ContentPart(_Loose):
    type: str
    text: str | None = None


class ChatMessage(_Loose):
    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: str | list[ContentPart] | None = None
    name: str | None = None

    def text(self) -> str:
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        parts = []
        for p in self.content:
            if p.type != "text":
                raise ValueError(f"content parts of type '{p.type}' are not supported; "
                                 "send text only")
            parts.append(p.text or "")
        return "".join(parts)


class StreamOptions(_Loose):
    include_usage: bool = False


class SkillDeskOptions(_Loose):
    learn: bool | None = Field(None, description="false: do not learn from this turn")


class ChatCompletionRequest(_Loose):
    model: str | None = Field(None, description="accepted and echoed; the server has one model")
    messages: list[ChatMessage] = Field(..., min_length=1, max_length=1000)
    stream: bool = False
    stream_options: StreamOptions | None = None
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    stop: str | list[str] | None = None
    seed: int | None = None
    n: int | None = Field(None, ge=1, le=1, description="only 1 is supported")
    presence_penalty: float | None = Field(None, ge=-2.0, le=2.0)
    frequency_penalty: float | None = Field(None, ge=-2.0, le=2.0)
    logprobs: bool | None = None
    tools: list[Any] | None = None
    tool_choice: Any = None
    response_format: dict[str, Any] | None = None
    user: str | None = Field(None, max_length=256,
                             description="ignored: identity comes from the API key only")
    skilldesk: SkillDeskOptions | None = None

    @field_validator("stop")
    @classmethod
    def _stops(cls, v: str | list[str] | None) -> list[str] | None:
        if v is None:
            return None
        stops = [v] if isinstance(v, str) else v
        if len(stops) > 4 or any(not s or len(s) > 200 for s in stops):
            raise ValueError("stop takes up to 4 non-empty strings of at most 200 characters")
        return stops


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class InjectedSkillOut(BaseModel):
    id: str
    name: str
    title: str
    version: str
    score: float


class TurnInfo(BaseModel):
    """SkillDesk's extension of a completion: what was retrieved and injected."""

    query: str
    rewritten: bool
    injected: list[InjectedSkillOut]
    learn: bool
    timings: dict[str, float] = Field(default_factory=dict,
                                      description="seconds: rewrite_s, retrieve_s, total_s")


class AssistantMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str
    refusal: None = None


class Choice(BaseModel):
    index: int = 0
    message: AssistantMessage
    logprobs: None = None
    finish_reason: str


class ChatCompletion(BaseModel):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    system_fingerprint: str | None = None
    choices: list[Choice]
    usage: Usage
    skilldesk: TurnInfo | None = None


# --- embeddings, models, health ---------------------------------------------------------------
class EmbeddingRequest(_Loose):
    input: str | list[str]
    model: str | None = None
    encoding_format: Literal["float", "base64"] | None = Field(
        None, description="base64: little-endian float32 bytes (what the openai client asks for)")
    user: str | None = Field(None, max_length=256, description="ignored")


class Embedding(BaseModel):
    object: Literal["embedding"] = "embedding"
    index: int
    embedding: list[float] | str


class EmbeddingUsage(BaseModel):
    prompt_tokens: int
    total_tokens: int


class EmbeddingList(BaseModel):
    object: Literal["list"] = "list"
    data: list[Embedding]
    model: str
    usage: EmbeddingUsage


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "skilldesk"


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]


class Health(BaseModel):
    status: Literal["ok", "loading", "error"]
    version: str
    model: str
    waiting: int
    busy: int


# --- skills -------------------------------------------------------------------------------------
class SkillSummary(BaseModel):
    id: str
    name: str = Field(description="the folder's slug (the Agent Skills name)")
    title: str
    description: str
    version: str
    level: str
    scope: Literal["user", "common"]
    owner: str = Field(description="the user, or the Common library")
    tags: list[str]
    path: str = Field(description="the SKILL.md file, relative to the bank")


class SkillDetail(SkillSummary):
    triggers: list[str]
    instructions: str = Field(description="the Markdown body")
    resources: list[str] = Field(description="files beside SKILL.md, relative to its folder")
    source: str
    created: str
    updated: str


class SkillError(BaseModel):
    path: str
    reason: str


class SkillListResponse(BaseModel):
    object: Literal["list"] = "list"
    data: list[SkillSummary]
    errors: list[SkillError] = Field(description="SKILL.md files that could not be read")


class SkillHitOut(BaseModel):
    skill: SkillSummary
    score: float = Field(description="the fused score that ranked the hit")
    dense: float
    lexical: float


class SkillSearchResponse(BaseModel):
    object: Literal["list"] = "list"
    query: str
    data: list[SkillHitOut]


class SkillVersion(BaseModel):
    version: str
    source: str
    updated: str
    content_hash: str
    current: bool


class SkillHistoryResponse(BaseModel):
    object: Literal["list"] = "list"
    skill_id: str
    data: list[SkillVersion] = Field(description="oldest first")


class RevertRequest(_Loose):
    version: str = Field(..., min_length=1, max_length=64, description="the version to restore")


class RememberRequest(_Loose):
    messages: list[ChatMessage] = Field(..., min_length=1, max_length=1000, description=(
        "the conversation up to the user message to remember (and the reply to it); the "
        "last user message is the one remembered"))
    wait: bool = Field(True, description="wait for the learning job; false: queue it and "
                                         "return its id at once")
    timeout: float = Field(120.0, gt=0, le=600, description="seconds to wait when wait=true")


class RememberAction(BaseModel):
    kind: Literal["add", "merge", "discard", "error"]
    reason: str
    skill: SkillSummary | None = Field(None, description="the skill written (add, merge) or "
                                                         "the one it matched")


class RememberResponse(BaseModel):
    object: Literal["skilldesk.remember"] = "skilldesk.remember"
    job_id: str | None
    done: bool = Field(description="false: still queued or running (wait=false, or the "
                                   "timeout passed); the job goes on in the background")
    data: list[RememberAction]


class ErrorBody(BaseModel):
    message: str
    type: str
    code: str | None = None
    param: str | None = None


class ErrorResponse(BaseModel):
    error: ErrorBody
