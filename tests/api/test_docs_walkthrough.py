"""The curl walk-through of docs/api.md, run as written.

The fenced blocks of its "Walk-through with curl" section are read in order: ``yaml`` blocks
are the files the commands read, ``sh`` blocks are run by ``bash`` (with the real ``curl``
and ``jq``) against ``live_server``, and each ``json`` / ``http`` block is the output the
command before it must give. What a reader substitutes is substituted, nothing else: the
host of ``API``, the tokens ``manage.py drf_create_token`` prints, and the ids the doc's own
run got (``RUN``, ``TASK``, ids and hashes inside outputs) — each paired with the value this
run gets the first time the doc shows it, and held to it after that. Instants only have to
be instants; every other value of every documented output must be exactly as documented.

``make run`` has a Celery worker; so has this test, and between two commands it waits until
every bulk operation is done and the executor is idle (a person typing the next command takes
longer than that).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support.waiting import eventually
from workflows import operations

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "api.md"
DOCUMENTED_HOSTS = ("http://127.0.0.1:8000", "http://127.0.0.1:8016")

UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
PLAN_HASH = r"[0-9a-f]{64}"
TOKEN = r"[0-9a-f]{40}"
IDENTIFIER = re.compile(rf"{UUID}|{PLAN_HASH}|{TOKEN}")
INSTANT = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)")
# integers that are row ids: they depend on what the database held before
INTEGER_IDS = {"id", "command"}
ELIDED = "…"  # the doc's mark for output left out ("… entries 1 and 2 …")

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        not (shutil.which("curl") and shutil.which("jq") and shutil.which("bash")),
        reason="the walk-through needs curl, jq and bash",
    ),
]


@dataclass(frozen=True)
class Block:
    lang: str
    text: str
    lead: str  # the prose between the previous block and this one, on one line
    heading: str  # the heading it is under


def walk_through() -> list[Block]:
    section = DOC.read_text().split("## Walk-through with curl", 1)[1].split("\n## ", 1)[0]
    blocks, last = [], 0
    for fence in re.finditer(r"^```(\w*)\n(.*?)^```[ \t]*$", section, re.M | re.S):
        headings = re.findall(r"^### (.+)$", section[: fence.start()], re.M) or ["Walk-through with curl"]
        blocks.append(Block(fence[1], fence[2], " ".join(section[last : fence.start()].split()), headings[-1]))
        last = fence.end()
    return blocks


class Correspondence:
    """The doc's run and this one: a documented id, token or hash is paired with this run's
    value the first time it is shown, and must be that value every time after."""

    def __init__(self, base_url: str) -> None:
        self.here: dict[Any, Any] = dict.fromkeys(DOCUMENTED_HOSTS, base_url)
        self.documented: dict[Any, Any] = {}

    def pair(self, documented: Any, actual: Any, where: str) -> None:
        if documented in self.here:
            assert self.here[documented] == actual, f"{where}: the doc shows one value where this run has two"
            return
        assert actual not in self.documented, f"{where}: two values of the doc are one value here"
        self.here[documented], self.documented[actual] = actual, documented

    def translate(self, text: str) -> str:
        for documented, actual in self.here.items():
            if isinstance(documented, str):
                text = text.replace(documented, actual)
        return text

    def agree_text(self, documented: str, actual: str, where: str) -> None:
        """Equal, where ids and hosts of the doc may stand for this run's (paired as seen)."""
        pattern, shown = "", []
        for piece in re.split(f"({IDENTIFIER.pattern})", documented):
            if IDENTIFIER.fullmatch(piece):
                pattern += f"({IDENTIFIER.pattern})"
                shown.append(piece)
            else:
                pattern += re.escape(self.translate(piece))
        found = re.fullmatch(pattern, actual)
        assert found, f"{where}: documented {documented!r}, got {actual!r}"
        for piece, value in zip(shown, found.groups(), strict=True):
            self.pair(piece, value, where)

    def agree(self, documented: Any, actual: Any, where: str = "", key: str = "") -> None:
        if isinstance(documented, dict):
            assert isinstance(actual, dict), f"{where}: documented an object, got {actual!r}"
            assert set(actual) == set(documented), f"{where}: members {sorted(actual)}, documented {sorted(documented)}"
            for name, value in documented.items():
                self.agree(value, actual[name], f"{where}/{name}", name)
        elif isinstance(documented, list):
            if len(documented) == 1 and isinstance(documented[0], str) and ELIDED in documented[0]:
                assert isinstance(actual, list), f"{where}: documented a list, got {actual!r}"
                return
            assert isinstance(actual, list) and len(actual) == len(documented), (
                f"{where}: documented {len(documented)} items, got {actual!r}"
            )
            for index, (doc_item, item) in enumerate(zip(documented, actual, strict=True)):
                self.agree(doc_item, item, f"{where}/{index}")
        elif isinstance(documented, str) and INSTANT.fullmatch(documented):
            assert isinstance(actual, str) and INSTANT.fullmatch(actual), f"{where}: not an instant: {actual!r}"
        elif isinstance(documented, str):
            assert isinstance(actual, str), f"{where}: documented {documented!r}, got {actual!r}"
            self.agree_text(documented, actual, where)
        elif isinstance(documented, int) and not isinstance(documented, bool) and key in INTEGER_IDS:
            assert type(actual) is int, f"{where}: documented an id, got {actual!r}"
            self.pair(documented, actual, where)
        else:
            assert type(actual) is type(documented) and actual == documented, (
                f"{where}: documented {documented!r}, got {actual!r}"
            )


def json_values(text: str) -> list[Any]:
    """Every JSON value of an output: one pretty-printed value or one per line (``jq -c``)."""
    decoder, values, at = json.JSONDecoder(), [], 0
    while (at := len(text) - len(text[at:].lstrip())) < len(text):
        value, at = decoder.raw_decode(text, at)
        values.append(value)
    return values


def http_parts(text: str) -> tuple[str, dict[str, str], str]:
    """(status line, headers by lower-case name, body) of ``curl -i`` output."""
    head, _, body = text.replace("\r\n", "\n").partition("\n\n")
    status, *lines = head.split("\n")
    headers = {}
    for line in lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return status, headers, body


class Walk:
    def __init__(self, base_url: str, workdir: Path) -> None:
        from django.db import connection

        self.same = Correspondence(base_url)
        self.workdir = workdir
        # "same environment as `make run`": this process's, on the database live_server serves
        self.env = {**os.environ, "SWITCHYARD_DB_NAME": connection.settings_dict["NAME"]}
        self.variables: dict[str, str] = {}
        self.tokens: dict[str, str] = {}  # the doc's token prefix -> the token printed here
        self.commands = 0

    def settle(self) -> None:
        from workflows.models import OPEN_BULK_STATUSES, BulkOperation

        eventually(
            lambda: not BulkOperation.objects.filter(status__in=OPEN_BULK_STATUSES).exists(),
            timeout=60,
            what="the bulk operations to finish",
        )
        report = operations.await_idle(timeout=60)
        assert report.idle, f"the executor did not go idle: {report}"

    def bash(self, script: str) -> str:
        self.settle()
        self.commands += 1
        # the manage.py lines run "in the repository", the curl lines next to the documents
        cwd = REPO if "manage.py" in script else self.workdir
        done = subprocess.run(
            ["bash", "-o", "pipefail", "-c", script],
            cwd=cwd,
            env={**self.env, **self.variables},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, f"{script}\nexit {done.returncode}: {done.stderr}"
        self.learn_tokens(script, done.stdout)
        return done.stdout

    def learn_tokens(self, script: str, output: str) -> None:
        """``# Generated token f0b3fe96… for user admin``: the doc's token of that user."""
        printed = dict((user, key) for key, user in re.findall(r"Generated token (\w+) for user (\S+)", output))
        for prefix, user in re.findall(r"# Generated token ([0-9a-f]+)… for user (\S+)", script):
            assert user in printed, f"drf_create_token printed no token for {user}"
            self.tokens[prefix] = printed[user]

    def assign(self, name: str, value: str) -> None:
        for prefix, token in self.tokens.items():
            if value.startswith(prefix):
                self.same.pair(value, token, f"{name}=")
        assert not IDENTIFIER.fullmatch(value) or value in self.same.here, (
            f"{name}={value}: the doc sets an id its walk-through never showed"
        )
        self.variables[name] = self.same.translate(value)

    def run_block(self, text: str) -> str:
        """Assignments are the reader's (substituted); every other line runs as written."""
        output, chunk = "", list[str]()
        for line in text.splitlines():
            assignment = re.fullmatch(r"([A-Z][A-Z0-9_]*)=(\S+)", line)
            if assignment:
                if any(c.strip() and not c.lstrip().startswith("#") for c in chunk):
                    output += self.bash("\n".join(chunk))
                chunk = []
                self.assign(assignment[1], assignment[2])
            else:
                chunk.append(line)
        if any(c.strip() and not c.lstrip().startswith("#") for c in chunk):
            output += self.bash("\n".join(chunk))
        return output

    def check(self, documented: Block, output: str, where: str) -> None:
        body = output
        if output.startswith("HTTP/"):
            status, headers, body = http_parts(output)
            if documented.lang == "http":
                doc_status, doc_headers, doc_body = http_parts(documented.text)
                assert status.split()[1:] == doc_status.split()[1:], f"{where}: {status}, documented {doc_status}"
                for name, value in doc_headers.items():
                    assert name in headers, f"{where}: no {name} header"
                    self.same.agree_text(value, headers[name], f"{where} {name}")
                documented = Block("json", doc_body, documented.lead, documented.heading)
            else:  # a documented body alone: its status, when it has one, is the answer's
                [doc_value] = json_values(documented.text)
                if isinstance(doc_value, dict) and "status" in doc_value and "code" in doc_value:
                    assert status.split()[1] == str(doc_value["status"]), f"{where}: {status}"
        expected, actual = json_values(documented.text), json_values(body)
        assert len(actual) == len(expected), f"{where}: {len(actual)} values, documented {len(expected)}:\n{body}"
        for index, (doc_value, value) in enumerate(zip(expected, actual, strict=True)):
            self.same.agree(doc_value, value, f"{where} #{index}")


# Outputs the doc shows for a request it describes instead of writing it out: the request the
# words describe, made from the command before.


def same_again(command: str) -> str:
    return command


def another_body(command: str) -> str:
    assert '"amount": 182.4' in command
    return command.replace('"amount": 182.4', '"amount": 182.5')


def without_the_permission(command: str) -> str:
    assert "$ADMIN" in command
    return re.sub(r"\|\s*jq\s+'[^']*'\s*$", "| jq .", command.replace("$ADMIN", "$ALICE"))


def first_page(command: str) -> str:
    assert '/history/"' in command
    return re.sub(r"\|\s*jq\s+'[^']*'\s*$", "| jq .", command.replace('/history/"', '/history/?page_size=2"'))


DESCRIBED: dict[str, Callable[[str], str]] = {
    "The same request again (same key, same body) answers the same command": same_again,
    "The same key with another body is refused": another_body,
    "Without the permission, the call is refused": without_the_permission,
    "Pages follow the cursor (`?page_size=2`)": first_page,
}


def test_the_curl_walk_through_of_the_api_docs_works_as_written(
    live_server: Any, demo_users: dict[str, Any], celery_worker_process: Any, tmp_path: Path
) -> None:
    from workflows.models import HistoryEntry, Run, Task

    walk = Walk(live_server.url, tmp_path)
    blocks = walk_through()
    command, output, outputs_checked = "", "", 0
    for index, block in enumerate(blocks):
        where = f"docs/api.md, {block.heading!r}, block {index + 1}"
        if block.lang == "yaml":
            [name] = re.findall(r"`([\w.-]+\.yaml)`", block.lead)
            (tmp_path / name).write_text(block.text)
            v2 = name.replace(".yaml", "-v2.yaml")
            said = f"`{v2}` is the same document with `definitionVersion: 2`"
            assert said in " ".join(DOC.read_text().split()) and "definitionVersion: 1\n" in block.text
            (tmp_path / v2).write_text(block.text.replace("definitionVersion: 1\n", "definitionVersion: 2\n"))
        elif block.lang == "sh":
            command, output = block.text, walk.run_block(block.text)
        elif block.lang in ("json", "http"):
            if blocks[index - 1].lang != "sh":
                described = [make for words, make in DESCRIBED.items() if block.lead.startswith(words)]
                assert described, f"{where}: an output with no command and no description of one"
                output = walk.bash(described[0](command))
                if described[0] is first_page:  # the doc elides them: "… entries 1 and 2 …"
                    assert [entry["seq"] for entry in json_values(output)[0]["results"]] == [1, 2], where
            walk.check(block, output, where)
            outputs_checked += 1
        else:
            pytest.fail(f"{where}: a block of unknown kind {block.lang!r}")

    assert walk.commands >= 17 and outputs_checked >= 18, (walk.commands, outputs_checked)
    # where the walk-through ends, as the database has it: the claim paid, its task decided
    run = Run.objects.get(pk=walk.variables["RUN"])
    assert (run.status, run.current_step, (run.state or {}).get("approved")) == ("COMPLETED", "paid", True)
    task = Task.objects.get(pk=walk.variables["TASK"])
    assert task.status == "COMPLETED"
    types = list(HistoryEntry.objects.filter(run=run).order_by("seq").values_list("type", flat=True))
    assert types[-5:] == ["TASK_COMPLETED", "DECISION", "DECISION", "WORKFLOW_COMPLETED", "COMMAND_COMPLETED"]
