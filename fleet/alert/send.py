"""Sending one notice: to a generic JSON webhook, a Slack-compatible webhook, or by e-mail (SMTP).

A sender raises `DeliveryFailed` with a line saying why (never the secret URL or password); the
caller records it on the notice and tries again later. Secrets are read from the environment the
alert process started with, by the names the route gives.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import smtplib
import ssl
import urllib.error
import urllib.request
from collections.abc import Mapping
from email.message import EmailMessage
from email.utils import formatdate, make_msgid
from typing import Any, Final

import orjson

from fleet.admin.alert_routes import AlertRoute

USER_AGENT: Final = "fleet-alert"
_ICONS: Final = {"alert": ":rotating_light:", "repeat": ":rotating_light:", "recovery": ":white_check_mark:"}


class DeliveryFailed(Exception):
    """The receiver could not be reached, or refused the notice; tried again later."""


def secret(route: AlertRoute, key: str, environ: Mapping[str, str]) -> str:
    """The value of the environment variable the route names under `key`."""
    var = route.target.get(key)
    value = environ.get(var) if var else None
    if not value:
        raise DeliveryFailed(f"{key} {var}: not set in the alert process's environment")
    return value


def send(
    route: AlertRoute, notice_id: int, payload: dict[str, Any], environ: Mapping[str, str], timeout_s: float
) -> None:
    """Deliver one notice by the route's kind; DeliveryFailed when it was not accepted."""
    if route.kind == "webhook":
        body = orjson.dumps({**payload, "id": notice_id})
        headers = {"X-Fleet-Event": payload["event"], "X-Fleet-Notice": str(notice_id)}
        if route.target.get("secret_env"):
            key = secret(route, "secret_env", environ).encode()
            headers["X-Fleet-Signature"] = "sha256=" + hmac.new(key, body, hashlib.sha256).hexdigest()
        post(secret(route, "url_env", environ), body, headers, timeout_s)
    elif route.kind == "slack":
        post(secret(route, "url_env", environ), orjson.dumps(slack_body(route, payload)), {}, timeout_s)
    else:
        mail(route, notice_id, payload, environ, timeout_s)


def post(url: str, body: bytes, headers: Mapping[str, str], timeout_s: float) -> None:
    """POST `body` as JSON; DeliveryFailed unless the answer is 2xx."""
    if not url.startswith(("http://", "https://")):
        raise DeliveryFailed("url_env: the URL must start with http:// or https://")
    request = urllib.request.Request(
        url,
        data=body,
        method="POST",
        headers={"Content-Type": "application/json", "User-Agent": USER_AGENT, **headers},
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as answer:
            answer.read(1024)
    except urllib.error.HTTPError as e:
        text = e.read(200).decode("utf-8", "replace").strip().splitlines()
        raise DeliveryFailed(f"HTTP {e.code}" + (f": {text[0]}" if text else "")) from None
    except (urllib.error.URLError, OSError, ValueError) as e:
        reason = getattr(e, "reason", e)
        raise DeliveryFailed(f"{type(e).__name__}: {reason}") from None


def slack_body(route: AlertRoute, payload: dict[str, Any]) -> dict[str, Any]:
    """A Slack-compatible message (`text`): alerts and repeats carry the route's `mention`;
    recovery notices are quiet, without it."""
    mention = route.target.get("mention")
    text = f"{_ICONS[payload['event']]} {payload['summary']}"
    if mention and payload["event"] != "recovery":
        text = f"{mention} {text}"
    return {"text": text}


def mail_message(route: AlertRoute, notice_id: int, payload: dict[str, Any]) -> EmailMessage:
    """The e-mail of a notice: its summary as subject, then the facts."""
    t = route.target
    msg = EmailMessage()
    msg["Subject"] = f"{t.get('subject_prefix', '[fleet]')} {payload['summary']}"[:250]
    msg["From"] = t["from"]
    msg["To"] = ", ".join(t["to"])
    msg["Date"] = formatdate(localtime=False)
    msg["Message-ID"] = make_msgid("fleet-alert")
    msg["X-Fleet-Event"] = payload["event"]
    msg["X-Fleet-Notice"] = str(notice_id)
    lines = [
        payload["summary"],
        "",
        f"schedule: {payload['schedule'] or '(the fleet)'}",
        f"verdict:  {payload['verdict']} ({payload['event']})",
        f"now:      {payload.get('verdict_now') or '-'}",
        f"since:    {payload['opened_at']}",
        f"at:       {payload['at']}",
        "",
        json.dumps({**payload, "id": notice_id}, indent=2, sort_keys=True),
    ]
    msg.set_content("\n".join(lines) + "\n")
    return msg


def mail(
    route: AlertRoute, notice_id: int, payload: dict[str, Any], environ: Mapping[str, str], timeout_s: float
) -> None:
    """Send the notice's e-mail through the route's SMTP server."""
    t = route.target
    msg = mail_message(route, notice_id, payload)
    password = secret(route, "smtp_password_env", environ) if t.get("smtp_user") else None
    try:
        smtp: smtplib.SMTP
        if t["smtp_security"] == "tls":
            smtp = smtplib.SMTP_SSL(
                t["smtp_host"], t["smtp_port"], timeout=timeout_s, context=ssl.create_default_context()
            )
        else:
            smtp = smtplib.SMTP(t["smtp_host"], t["smtp_port"], timeout=timeout_s)
        with smtp:
            if t["smtp_security"] == "starttls":
                smtp.starttls(context=ssl.create_default_context())
            if password is not None:
                smtp.login(t["smtp_user"], password)
            refused = smtp.send_message(msg)
        if refused:
            raise DeliveryFailed(f"SMTP refused {', '.join(sorted(refused))}")
    except smtplib.SMTPResponseException as e:
        text = (
            e.smtp_error.decode("utf-8", "replace") if isinstance(e.smtp_error, bytes) else str(e.smtp_error)
        )
        raise DeliveryFailed(f"SMTP {e.smtp_code}: {text.strip()[:200]}") from None
    except (smtplib.SMTPException, OSError) as e:
        raise DeliveryFailed(f"{type(e).__name__}: {str(e).strip()[:200]}") from None
