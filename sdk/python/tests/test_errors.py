"""Typed errors from broker answers (no broker needed)."""

from airlock import BY_CODE, APIError, ConstraintViolated, RateLimited, error_for


def test_the_header_names_the_class():
    e = error_for(429, {"X-Airlock-Code": "rate_limited", "Retry-After": "3"},
                  b'{"type":"urn:airlock:problem:rate_limited","status":429,"code":"rate_limited","detail":"slow down"}')
    assert isinstance(e, RateLimited) and e.retry_after == 3.0 and e.detail == "slow down"


def test_a_problem_without_the_header_and_an_answer_without_a_problem():
    e = error_for(403, {}, b'{"code":"constraint_violated","param":"body.to","constraint":"pin","request_id":"req_1"}')
    assert isinstance(e, ConstraintViolated) and (e.param, e.constraint, e.request_id) == ("body.to", "pin", "req_1")
    plain = error_for(502, {}, b"Bad Gateway")
    assert type(plain) is APIError and plain.code is None and plain.detail == "Bad Gateway"


def test_class_names_are_the_codes_in_camel_case():
    for code, cls in BY_CODE.items():
        assert cls.__name__ == "".join(w.capitalize() for w in code.split("_"))


def test_one_class_per_code_of_the_contract():
    import pathlib
    import re
    spec = (pathlib.Path(__file__).parents[3] / "api" / "openapi.yaml").read_text()
    m = re.search(r"enum: \[(invalid_token[^\]]*)\]", spec)
    assert m, "api/openapi.yaml names the problem codes"
    assert sorted(BY_CODE) == sorted(c.strip() for c in m.group(1).split(","))
