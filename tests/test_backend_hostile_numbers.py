"""A 2xx body holding an integer longer than Python converts (4300 digits,
sys.int_info.default_max_str_digits) is a bad body, not an exception out of
the backend: json.loads raises ValueError, not JSONDecodeError, for it.
Real parts: the OpenAI backend over loopback HTTP against a raw socket
server."""

from __future__ import annotations

from tests.test_backends_wire_h1 import RawServer, answer, complete_once


def test_an_integer_too_long_to_convert_is_a_bad_body() -> None:
    raw = (b'{"choices":[{"message":{"role":"assistant","content":"x"}}],"n":'
           + b"1" * 5000 + b"}")
    server = RawServer(lambda c, r: (answer(raw), False))
    try:
        result = complete_once(server)
    finally:
        server.close()
    assert result.error is not None and result.error.code == "upstream_bad_json"
