#!/usr/bin/env python3
"""Checks webhook deliveries with the third-party Standard Webhooks library.

The API tests (tests/api/webhooks.rs) record what tenantd POSTed to a receiver and hand
each attempt here, so that a signature counts as right only when a verifier that is not
tenantd's own code accepts it. Run it with the interpreter of .venv-webhooks, which
scripts/webhook-deps.sh makes.

Standard input: a JSON list of items, each

    {"secret": "whsec_…", "headers": {"webhook-id": …, …}, "body": "<the exact body text>"}

or with "secrets": ["whsec_…", …] instead of "secret": then every secret listed must verify
the attempt on its own (as both secrets do during the 24 hours after a rotation).

Standard output: one line per item, in order, "ok" or "fail: <reason>" (with a secret's
position in "secrets", never the secret). Exit code 0 only if every item is ok; 2 for input
that is not such a list.
"""

import json
import sys

import standardwebhooks


def check(item):
    """None if every secret of the item verifies it, else the reason it does not."""
    if "secrets" in item:
        secrets = item["secrets"]
    else:
        secrets = [item["secret"]]
    if not secrets:
        return "no secret given"
    headers = item["headers"]
    body = item["body"]
    for i, secret in enumerate(secrets):
        where = "" if len(secrets) == 1 else f"secret {i}: "
        try:
            standardwebhooks.Webhook(secret).verify(body, headers)
        except standardwebhooks.WebhookVerificationError as e:
            return f"{where}{e}"
        except Exception as e:  # a malformed header or secret is a failure, not a crash
            return f"{where}{type(e).__name__}: {e}"
    return None


def main():
    try:
        items = json.load(sys.stdin)
        if not isinstance(items, list):
            raise ValueError("not a JSON list")
    except ValueError as e:
        print(f"verify.py: the input is not a JSON list of items: {e}", file=sys.stderr)
        return 2
    failed = 0
    for item in items:
        try:
            reason = check(item)
        except (KeyError, TypeError, AttributeError) as e:
            reason = f"a malformed item ({type(e).__name__}: {e})"
        if reason is None:
            print("ok")
        else:
            failed += 1
            print(f"fail: {reason}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
