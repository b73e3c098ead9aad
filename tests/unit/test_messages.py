"""Strict validation of everything a worker sends."""

import pydantic
import pytest

from pi_sandbox.protocol.messages import (
    WORKER_MESSAGE,
    DispatchResult,
    InitializeResult,
    NotificationMessage,
    ResponseMessage,
    ToolResultWire,
)


def test_a_response_with_a_result_validates():
    message = WORKER_MESSAGE.validate_python({"jsonrpc": "2.0", "id": 3, "result": {"a": 1}})
    assert isinstance(message, ResponseMessage) and message.result == {"a": 1}


def test_a_notification_validates():
    message = WORKER_MESSAGE.validate_python(
        {"jsonrpc": "2.0", "method": "log", "params": {"message": "x"}}
    )
    assert isinstance(message, NotificationMessage)


@pytest.mark.parametrize(
    "frame",
    [
        {"jsonrpc": "2.0", "id": 1, "result": 1, "extra": True},  # unknown field
        {"jsonrpc": "1.0", "id": 1, "result": 1},  # wrong version
        {"jsonrpc": "2.0", "id": 1},  # neither result nor error
        {"jsonrpc": "2.0", "id": 1, "result": 1, "error": {"code": 1, "message": "x"}},  # both
        {"jsonrpc": "2.0", "id": "abc", "result": 1},  # our ids are integers
        {"jsonrpc": "2.0", "id": 1, "error": {"code": 1, "message": "x", "junk": 1}},
        {"jsonrpc": "2.0", "method": "", "params": {}},
    ],
)
def test_malformed_worker_messages_are_rejected(frame):
    with pytest.raises(pydantic.ValidationError):
        WORKER_MESSAGE.validate_python(frame)


def test_initialize_result_rejects_a_tool_name_providers_cannot_take():
    with pytest.raises(pydantic.ValidationError):
        InitializeResult.model_validate(
            {
                "protocol_version": 1,
                "generation": 1,
                "pid": 1,
                "tools": [{"name": "bad name!", "description": "", "parameters": {}}],
            }
        )


def test_tool_result_rejects_unknown_content_block_types():
    with pytest.raises(pydantic.ValidationError):
        ToolResultWire.model_validate({"content": [{"type": "script", "text": "x"}]})


def test_dispatch_result_rejects_unknown_fields():
    with pytest.raises(pydantic.ValidationError):
        DispatchResult.model_validate({"state": {}, "stopped": False, "errors": [], "sneaky": 1})
