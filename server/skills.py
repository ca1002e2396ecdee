"""Skill endpoints: list, get, search, history and revert the caller's skills, and remember a
message (the app's *Remember this*: learn from it because the user says it lasts).

A skill is named by its id, its name (the folder slug) or its title — never by a path: a
reference with a separator, a leading dot or a NUL is refused with 400 before the bank is
touched. Paths in answers are relative to the bank. Only the caller's own skills can be
reverted; Common skills are read-only (403).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from fastapi import APIRouter, Depends, Query

from engine.bank.skill import Skill
from engine.desk import SkillDesk
from engine.fsutil import check_component
from server.desks import Desks
from server.errors import APIError
from server.schemas import (
    ChatMessage,
    RememberRequest,
    RememberResponse,
    RevertRequest,
    SkillDetail,
    SkillHistoryResponse,
    SkillListResponse,
    SkillSearchResponse,
)


def _rel(path: Any, root: Path) -> str:
    if not path:
        return ""
    try:
        return str(Path(path).resolve().relative_to(root))
    except ValueError:
        return Path(path).name


def summary(s: Skill, root: Path) -> dict[str, Any]:
    return {"id": s.id, "name": s.name, "title": s.title, "description": s.description,
            "version": s.version, "level": s.level, "scope": s.scope, "owner": s.owner,
            "tags": [str(t) for t in s.tags], "path": _rel(s.path, root)}


def detail(s: Skill, root: Path) -> dict[str, Any]:
    return {**summary(s, root), "triggers": [str(t) for t in s.triggers],
            "instructions": s.instructions, "resources": list(s.resources),
            "source": s.source, "created": s.created, "updated": s.updated}


def _check_ref(ref: str) -> str:
    try:
        check_component(ref, "skill reference")
    except Exception as exc:  # UnsafePathError: a path, a dot name, control characters
        raise APIError(400, str(exc), "invalid_name", "ref") from None
    return ref


def find_skill(desk: SkillDesk, user: str, ref: str) -> Skill:
    """A skill of ``user`` (or Common) by id, name or title (never a path: refs come from URLs)."""
    _check_ref(ref)
    return desk.find(ref)


def plain_messages(messages: list[ChatMessage]) -> list[dict[str, str]]:
    """``{"role", "content"}`` dicts of a request's messages (APIError for tools, images)."""
    out = []
    for i, m in enumerate(messages):
        if m.role in ("tool", "function"):
            raise APIError(400, f"messages[{i}]: role '{m.role}' is not supported (no tools)",
                           "unsupported_parameter", f"messages.{i}.role")
        try:
            text = m.text()
        except ValueError as exc:
            raise APIError(400, f"messages[{i}]: {exc}", "invalid_value",
                           f"messages.{i}.content") from None
        out.append({"role": "system" if m.role == "developer" else m.role, "content": text})
    return out


def skills_router(desks: Desks, current_user: Callable[..., str],
                  learn: bool = True) -> APIRouter:
    router = APIRouter(prefix="/v1/skills", tags=["skills"])

    @router.post("/remember", response_model=RememberResponse, summary="Remember a message",
                 responses={403: {"description": "the server runs with --no-learn"}})
    def remember(body: RememberRequest, user: str = Depends(current_user)) -> dict:
        """Learn from the last user message of ``messages`` because the user says it lasts
        (the app's *Remember this*): no model guess at whether it does; every check after
        extraction (nothing the user did not say becomes a rule, no case details, the
        add/merge judge) stands. The job queues behind chat turns like any learning."""
        if not learn:
            raise APIError(403, "learning is off on this server (skilldesk serve --no-learn)",
                           "learning_off")
        messages = plain_messages(body.messages)
        if not any(m["role"] == "user" and m["content"].strip() for m in messages):
            raise APIError(400, "there is no user message to remember", "invalid_value",
                           "messages")
        desk = desks.get(user)
        report = desk.remember(messages, wait=False)
        done = False
        if body.wait:
            try:
                report = desk.learning.result(report.job_id, body.timeout)
                done = True
            except TimeoutError:
                pass
        root = desk.bank.root
        return {"object": "skilldesk.remember", "job_id": report.job_id, "done": done,
                "data": [{"kind": a.kind, "reason": a.reason,
                          "skill": summary(a.skill, root) if a.skill is not None else None}
                         for a in report.actions]}

    @router.get("", response_model=SkillListResponse, summary="List skills")
    def list_skills(scope: Literal["user", "common", "all"] = "all",
                    user: str = Depends(current_user)) -> dict:
        """The caller's skills and/or the shared Common ones, plus files that could not be read."""
        desk = desks.get(user)
        res = desk.bank.load(user, scope)
        root = desk.bank.root
        return {"object": "list", "data": [summary(s, root) for s in res.skills],
                "errors": [{"path": _rel(e.path, root), "reason": e.reason} for e in res.errors]}

    @router.get("/search", response_model=SkillSearchResponse, summary="Search skills")
    def search_skills(q: str = Query(..., min_length=1, max_length=2000,
                                     description="what the skill should help with"),
                      top_k: int = Query(5, ge=1, le=50),
                      user: str = Depends(current_user)) -> dict:
        """Hybrid retrieval (dense + BM25, fused), as a chat turn would run it."""
        desk = desks.get(user)
        root = desk.bank.root
        hits = desk.search(q, top_k=top_k)
        return {"object": "list", "query": q,
                "data": [{"skill": summary(h.skill, root), "score": float(h.score),
                          "dense": float(h.dense), "lexical": float(h.lexical)} for h in hits]}

    @router.get("/{ref}", response_model=SkillDetail, summary="Get a skill")
    def get_skill(ref: str, user: str = Depends(current_user)) -> dict:
        """One skill by id, name or title, with its instructions."""
        desk = desks.get(user)
        return detail(find_skill(desk, user, ref), desk.bank.root)

    @router.get("/{ref}/history", response_model=SkillHistoryResponse,
                summary="A skill's versions")
    def skill_history(ref: str, user: str = Depends(current_user)) -> dict:
        """Every stored version, oldest first; ``current`` marks the one on disk now."""
        desk = desks.get(user)
        s = find_skill(desk, user, ref)
        versions = desk.bank.history.versions(s.id)
        return {"object": "list", "skill_id": s.id,
                "data": [{"version": v.version, "source": v.source, "updated": v.updated,
                          "content_hash": v.content_hash,
                          "current": v.content_hash == s.content_hash} for v in versions]}

    @router.post("/{ref}/revert", response_model=SkillDetail, summary="Revert a skill",
                 responses={403: {"description": "a Common skill (read-only)"},
                            409: {"description": "the file changed on disk meanwhile"}})
    def revert_skill(ref: str, body: RevertRequest, user: str = Depends(current_user)) -> dict:
        """Write a new version whose content equals ``version`` (history is never rewound)."""
        desk = desks.get(user)
        s = find_skill(desk, user, ref)
        if s.scope != "user":
            raise APIError(403, f"{s.title!r} is a shared (Common) skill and cannot be reverted",
                           "read_only")
        if not any(v.version == body.version for v in desk.bank.history.versions(s.id)):
            raise APIError(404, f"skill {s.title!r} has no version {body.version!r}",
                           "not_found", "version")
        return detail(desk.revert(s, body.version), desk.bank.root)

    return router
