"""An answer that is not promoter's (another server on the port) is named in one line."""

from __future__ import annotations

import httpx
import pytest

from promoter.client.wire import raise_for
from promoter.errors import PromoterError

PAGE = (
    '<!DOCTYPE HTML>\n<html lang="en">\n    <head>\n        <meta charset="utf-8">\n'
    "        <title>Error response</title>\n"
)


def test_another_servers_html_page_is_quoted_on_one_line() -> None:
    request = httpx.Request("GET", "http://127.0.0.1:8809/healthz")
    response = httpx.Response(501, text=PAGE, request=request)
    with pytest.raises(PromoterError) as caught:
        raise_for(response)
    assert caught.value.detail == (
        "GET /healthz answered 501 without a problem document: <!DOCTYPE HTML> "
        '<html lang="en"> <head> <meta charset="utf-8"> <title>Error response</title>'
    )
