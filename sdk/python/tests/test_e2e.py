"""The SDK end to end against a real `broker dev` (conftest.py): orchestrator, sandbox, reviewer, auditor."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import subprocess
import sys
import textwrap
import urllib.parse
import uuid

import httpx
import pytest

import airlock
from airlock import (Action, Airlock, AsyncAirlock, ConstraintViolated, KillswitchEngaged, NoMatchingGrant,
                     SessionRevoked, ApprovalDenied, InvalidToken, NotFound)

PAYMENTS = {"method": "POST", "path": "/payments", "deny_unknown": True,
            "constraints": {"body.to": {"pin": "acme"}, "body.amount": {"min": 1, "max": 100, "required": True}}}


def demo_session(client, *, untrusted: bool = False, rules=None, task=None):
    rules = rules or [{"method": "GET", "path": "/hello"}, {"method": "GET", "path": "/whoami"},
                      {"method": "GET", "path": "/missing"}, PAYMENTS]
    return client.sessions.create({
        "task_id": task or "sdk-" + uuid.uuid4().hex[:8], "ttl": "10m", "untrusted_input": untrusted,
        "isolation": "microvm", "grants": [{"upstream": "demo", "rules": rules}]})


def assert_no_canary(broker, *texts):
    key = broker.demo_key
    forms = [key, base64.b64encode(key.encode()).decode(), urllib.parse.quote(key), key.encode().hex()]
    for t in texts:
        for f in forms:
            assert f not in t, "the demo key reached the client side"


SANDBOX = textwrap.dedent("""
    # The sandbox: stock urllib with nothing but the environment the orchestrator gave it.
    import json, os, urllib.request, urllib.error
    out = {"env_has_airlock": sorted(k for k in os.environ if k.startswith("AIRLOCK_"))}
    def call(path, body=None):
        req = urllib.request.Request("https://demo.airlock.test" + path, method="POST" if body else "GET",
                                     data=json.dumps(body).encode() if body else None,
                                     headers={"Content-Type": "application/json",
                                              "Authorization": "Bearer " + os.environ["DEMO_TOKEN"]})
        try:
            with urllib.request.urlopen(req) as r:
                return {"status": r.status, "code": r.headers.get("X-Airlock-Code"), "body": r.read().decode()}
        except urllib.error.HTTPError as e:
            return {"status": e.code, "code": e.headers.get("X-Airlock-Code"), "body": e.read().decode()}
    out["hello"] = call("/hello")
    out["whoami"] = call("/whoami")
    out["pay"] = call("/payments", {"amount": 5})
    out["mallory"] = call("/payments", {"to": "mallory", "amount": 5})
    print(json.dumps(out))
""")


def test_sandbox_subprocess_reaches_the_demo_api_through_the_proxy_door(broker, client, tmp_path):
    session = demo_session(client)
    ca = tmp_path / "session-ca.pem"
    ca.write_text(session.ca_pem())
    env = session.env(str(ca))
    assert env["HTTPS_PROXY"].startswith("http://airlock:" + session.token + "@")
    assert env["DEMO_TOKEN"].startswith("demo_")  # the placeholder, worth nothing
    run = subprocess.run([sys.executable, "-c", SANDBOX], env={"PATH": os.environ["PATH"], **env},
                         capture_output=True, text=True, check=True)
    out = json.loads(run.stdout)
    assert out["env_has_airlock"] == []
    assert out["hello"]["status"] == 200 and "hello from the demo API" in out["hello"]["body"]
    assert out["hello"]["code"] is None
    assert json.loads(out["whoami"]["body"]) == {"authorization_received": "[REDACTED]"}
    assert out["pay"]["status"] == 201 and json.loads(out["pay"]["body"])["received"] == {"amount": 5, "to": "acme"}
    assert out["mallory"]["status"] == 403 and out["mallory"]["code"] == "constraint_violated"
    assert_no_canary(broker, run.stdout, run.stderr)


def test_env_equals_broker_session_env(broker, client, tmp_path):
    session = demo_session(client)
    ca = tmp_path / "ca.pem"
    cli = subprocess.run([broker.binary, "session", "env", session.id, "--format", "env", "--ca-out", str(ca)],
                         env={"PATH": os.environ["PATH"], "AIRLOCK_ADDR": broker.control, "AIRLOCK_TOKEN": broker.admin,
                              "AIRLOCK_SESSION_TOKEN": session.token},
                         capture_output=True, text=True, check=True)
    printed = dict(line.split("=", 1) for line in cli.stdout.splitlines())
    got = session.env(str(ca))
    assert list(got.items()) == list(printed.items())
    assert airlock.format_env(got, "env") == cli.stdout
    assert ca.read_text() == session.ca_pem() == session["proxy"]["ca_pem"]
    # A token with characters that userinfo escapes comes out as Go's url.UserPassword writes it.
    odd = "a'b(c)*!d:e@f/g?h$&+,;=~"
    cli = subprocess.run([broker.binary, "session", "env", session.id, "--format", "env", "--ca-out", str(ca),
                          "--token", odd],
                         env={"PATH": os.environ["PATH"], "AIRLOCK_ADDR": broker.control, "AIRLOCK_TOKEN": broker.admin},
                         capture_output=True, text=True, check=True)
    assert airlock.format_env(session.env(str(ca), token=odd), "env") == cli.stdout
    # A session read back has no token: the URL carries the placeholder, as the CLI's would.
    again = client.sessions.get(session.id)
    assert airlock.TOKEN_PLACEHOLDER in again.env(str(ca))["HTTPS_PROXY"]


def test_rest_door_answers_and_typed_errors(broker, client):
    session = demo_session(client)
    r = session.request("demo", "GET", "/hello")
    assert r.status_code == 200 and "hello" in r.json()["message"]
    assert session.request("demo", "GET", "/whoami").json() == {"authorization_received": "[REDACTED]"}
    paid = session.request("demo", "POST", "/payments", json={"amount": 9})
    assert paid.status_code == 201 and paid.json()["received"] == {"amount": 9, "to": "acme"}

    with pytest.raises(ConstraintViolated) as e:
        session.request("demo", "POST", "/payments", json={"to": "mallory", "amount": 9})
    err = e.value
    assert isinstance(err, airlock.APIError) and isinstance(err, airlock.AirlockError)
    assert (err.status, err.code, err.param, err.constraint) == (403, "constraint_violated", "body.to", "pin")
    assert err.request_id and err.request_id.startswith("req_")
    assert "mallory" not in str(err)

    with pytest.raises(NoMatchingGrant):
        session.request("demo", "DELETE", "/payments")
    # The upstream's own error is its answer, not an exception: it carries no X-Airlock-Code.
    missing = session.request("demo", "GET", "/missing")
    assert missing.status_code == 404 and "x-airlock-code" not in missing.headers
    with pytest.raises(NotFound):
        session.request("nosuch", "GET", "/x")
    assert_no_canary(broker, r.text, paid.text, missing.text)


def test_gated_call_waits_for_a_reviewer(broker, client):
    session = demo_session(client, untrusted=True)
    assert session["rule_of_two"]["gated"] is True
    action = session.request("demo", "POST", "/payments", json={"amount": 7})
    assert isinstance(action, Action) and action.status == "pending"
    with pytest.raises(airlock.WaitTimeout) as e:  # no time left: not one request
        action.wait(timeout=0)
    assert e.value.action is action

    reviewer_token = client.tokens.create("reviewer", "sdk-reviewer-" + uuid.uuid4().hex[:6])
    with Airlock(broker.control, reviewer_token["token"], sandbox_addr=broker.sandbox) as reviewer:
        pending = {a["id"]: a for a in reviewer.approvals.list(status="pending")}
        assert action.id in pending
        shown = reviewer.approvals.get(action.id)
        assert json.loads(shown["request"]["body"]) == {"amount": 7, "to": "acme"}
        assert shown["filled"] == ["body.to"]
        # The session's creator cannot approve it (Rule of Two: another identity decides).
        with pytest.raises(airlock.Forbidden):
            client.approvals.approve(action.id)
        decided = reviewer.approvals.approve(action.id, comment="ok")
        assert decided["status"] in ("executing", "executed")

        done = action.wait(timeout=120)
        assert done is action and action.status == "executed"
        result = action.result()
        assert result.status_code == 201 and result.json()["received"] == {"amount": 7, "to": "acme"}

        denied = session.request("demo", "POST", "/payments", json={"amount": 8})
        reviewer.approvals.deny(denied.id, comment="no")
        assert denied.wait(timeout=120).status == "denied"
        with pytest.raises(ApprovalDenied):
            denied.result()

    client.tokens.revoke(reviewer_token["id"])
    assert reviewer_token["id"] not in {t["id"] for t in client.tokens.list()}
    with Airlock(broker.control, reviewer_token["token"]) as revoked, pytest.raises(InvalidToken):
        revoked.approvals.list()


def test_killswitch_and_session_kill(broker, client):
    session = demo_session(client)
    try:
        engaged = client.killswitch.engage(reason="sdk test")
        assert engaged["engaged"] is True and client.killswitch.status()["reason"] == "sdk test"
        with pytest.raises(KillswitchEngaged) as e:
            session.request("demo", "GET", "/hello")
        assert e.value.status == 503
    finally:
        client.killswitch.release()
    assert client.killswitch.status()["engaged"] is False
    assert session.request("demo", "GET", "/hello").status_code == 200

    killed = client.sessions.revoke(session.id)
    assert killed.status == "revoked"
    with pytest.raises(SessionRevoked):
        session.request("demo", "GET", "/hello")


def test_grants_sessions_list_and_operations(broker, client):
    session = demo_session(client, rules=[{"method": "GET", "path": "/hello"}])
    with pytest.raises(NoMatchingGrant):
        session.request("demo", "GET", "/whoami")
    grant = client.grants.add(session.id, {"upstream": "demo", "rules": [{"method": "GET", "path": "/whoami"}]})
    assert session.request("demo", "GET", "/whoami").status_code == 200
    assert client.grants.get(grant["id"])["uses"] == 1
    assert client.grants.revoke(grant["id"])["status"] == "revoked"
    with pytest.raises(NoMatchingGrant):
        session.request("demo", "GET", "/whoami")
    with pytest.raises(airlock.BadRequest) as e:
        client.grants.add(session.id, {"upstream": "demo", "rules": [{"method": "GET", "path": "no-slash"}]})
    assert e.value.field

    first = client.sessions.list(limit=1)
    assert len(first.items) == 1 and first.next
    ids = {s.id for s in client.sessions.list(cursor=first.next, limit=1000)} | {first.items[0].id}
    assert session.id in ids
    assert client.health() == {"status": "ok"} == client.health(plane="sandbox")
    assert client.ready()["status"] == "ready"
    assert "airlock_calls_total" in client.metrics()
    assert client.audit.verify()["ok"] is True
    assert client.audit.public_key()["algorithm"] == "ed25519"
    assert isinstance(client.audit.checkpoints(), list)


def test_audit_export_streams_records(broker, client):
    session = demo_session(client)
    session.request("demo", "GET", "/hello")
    with pytest.raises(ConstraintViolated):
        session.request("demo", "POST", "/payments", json={"to": "mallory", "amount": 1})
    records = list(client.audit.export(session_id=session.id))
    types = [r["type"] for r in records]
    assert types[0] == "session.created" and "call.allowed" in types and "call.completed" in types
    assert any(r["type"] == "call.denied" and r["code"] == "constraint_violated" for r in records)
    assert all(r["session_id"] == session.id for r in records)

    previous = None
    for r in client.audit.export():  # the whole chain, streamed line by line
        if previous is not None:
            assert r["seq"] == previous["seq"] + 1 and r["prev_hash"] == previous["hash"]
        previous = r
    csv = client.audit.export(format="csv", session_id=session.id)
    header = next(csv)
    assert header.startswith("seq,") or header.startswith('"seq"')
    assert len(list(csv)) == len(records)
    assert_no_canary(broker, json.dumps(records))


def test_injected_httpx_client_and_environment_defaults(broker, monkeypatch):
    seen = []
    hc = httpx.Client(event_hooks={"request": [lambda req: seen.append((req.method, req.url.path))]})
    with Airlock(broker.control, broker.admin, sandbox_addr=broker.sandbox, http=hc) as c:
        s = demo_session(c)
        s.request("demo", "GET", "/hello")
    assert ("POST", "/v1/sessions") in seen and ("GET", "/v1/proxy/demo/hello") in seen
    assert not hc.is_closed, "the client closed an httpx.Client it was given"
    hc.close()

    monkeypatch.setenv("AIRLOCK_ADDR", broker.control.removeprefix("http://"))
    monkeypatch.setenv("AIRLOCK_TOKEN", broker.admin)
    monkeypatch.setenv("AIRLOCK_SANDBOX_ADDR", broker.sandbox)
    with Airlock() as c:
        assert c.addr == broker.control and c.sandbox_addr == broker.sandbox
        s = demo_session(c)
        assert s.request("demo", "GET", "/hello").status_code == 200
        # A sandbox that holds only its token.
        assert c.attach(s.token).request("demo", "GET", "/hello").status_code == 200


def test_async_client(broker):
    async def pending_of(c, session_id):
        while True:  # until the broker has queued the call (a condition, not a time bound)
            items = [a for a in await c.approvals.list(status="pending") if a["session_id"] == session_id]
            if items:
                return items[0]
            await asyncio.sleep(0.01)

    async def main():
        injected = httpx.AsyncClient(timeout=30)
        async with AsyncAirlock(broker.control, broker.admin, sandbox_addr=broker.sandbox, http=injected) as c:
            session = await demo_session(c, untrusted=True)
            assert (await session.ca_pem()).startswith("-----BEGIN CERTIFICATE-----")
            r = await session.request("demo", "GET", "/hello")
            assert r.status_code == 200
            with pytest.raises(ConstraintViolated):
                await session.request("demo", "POST", "/payments", json={"to": "mallory", "amount": 2})
            action = await session.request("demo", "POST", "/payments", json={"amount": 3})
            assert isinstance(action, Action)
            tok = await c.tokens.create("reviewer", "sdk-async-" + uuid.uuid4().hex[:6])
            async with AsyncAirlock(broker.control, tok["token"]) as reviewer:
                await reviewer.approvals.approve(action.id)
            await action.wait(timeout=120)
            assert action.status == "executed"
            assert (await action.result()).json()["received"] == {"amount": 3, "to": "acme"}
            # Prefer: wait on the call itself: approved while it waits, it answers the upstream's response.
            held = asyncio.ensure_future(session.request("demo", "POST", "/payments", json={"amount": 4}, wait=60))
            queued = await pending_of(c, session.id)
            async with AsyncAirlock(broker.control, tok["token"]) as reviewer:
                await reviewer.approvals.approve(queued["id"])
            answer = await held
            assert not isinstance(answer, Action) and answer.status_code == 201
            assert answer.json()["received"] == {"amount": 4, "to": "acme"}
            types = [rec["type"] async for rec in c.audit.export(session_id=session.id)]
            assert "action.executed" in types and "action.approved" in types
            await c.killswitch.engage(reason="async")
            try:
                with pytest.raises(KillswitchEngaged):
                    await session.request("demo", "GET", "/hello")
            finally:
                await c.killswitch.release()

        assert not injected.is_closed
        await injected.aclose()

    asyncio.run(main())
