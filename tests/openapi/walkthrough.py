"""The walk-through of docs/api.md, driven through a client generated from openapi.json by
openapi-python-client: create, read, list, reserve, commit, release, renew by periods, charge,
read the events, run a webhook endpoint from creation to deletion (docs/webhooks.md),
tombstone, and send batches (docs/batches.md; its Python block runs as written, and must print
the lines the page shows). Every answer, every error kind a client can provoke included, must
parse into the model the document names for its status. Left out: 408, 500 and 503 (they need
a slow client, a broken disk or a full queue), 501 (httpx sends no transfer coding but
chunked), and 405 and 404 not_found (answers to no operation of the document).

    python3 walkthrough.py BASE_URL ADMIN_TOKEN   (the generated package on PYTHONPATH)

The server must run with --webhook-allow-http: the webhook endpoint is an http:// URL of a
receiver this script starts on 127.0.0.1. Without --webhook-allow-private its deliveries are
refused ("address not allowed"); with it they reach the receiver. Either way they parse.

Prints one line per step and "N passed, 0 failed" at the end; exits 1 at the first failure.
"""

import contextlib
import io
import json
import os
import re
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import httpx

from tenantd_client import AuthenticatedClient
from tenantd_client.api.batches import send_batch
from tenantd_client.api.budgets import (
    close_budget,
    create_budget,
    credit_budget,
    debit_budget,
    get_budget,
    get_entry,
    list_budgets,
    list_entries,
    list_periods,
    update_budget,
)
from tenantd_client.api.charges import create_charge
from tenantd_client.api.events import get_event, list_events, list_tenant_events
from tenantd_client.api.reservations import (
    commit_reservation,
    create_reservation,
    extend_reservation,
    get_reservation,
    list_reservations,
    release_reservation,
)
from tenantd_client.api.tenants import create_tenant, get_tenant, list_tenants, tombstone_tenant
from tenantd_client.api.webhooks import (
    create_webhook_endpoint,
    delete_webhook_endpoint,
    get_webhook_endpoint,
    list_webhook_deliveries,
    list_webhook_endpoints,
    retry_webhook_delivery,
    rotate_webhook_endpoint_secret,
    update_webhook_endpoint,
)
from tenantd_client.models import (
    ActiveReservation,
    BatchCharge,
    BatchChargeOp,
    BatchCommit,
    BatchCommitOp,
    BatchCredit,
    BatchCreditOp,
    BatchDebit,
    BatchDebitOp,
    BatchExtend,
    BatchExtendOp,
    BatchItemProblem,
    BatchRelease,
    BatchReleaseOp,
    BatchRequest,
    BatchReserve,
    BatchReserveOp,
    BatchResponse,
    BatchResult,
    Budget,
    BudgetEvent,
    BudgetMovementEvent,
    BudgetPage,
    BudgetPatch,
    ChargeRequest,
    ClosedBudget,
    CommitRequest,
    CommittedReservation,
    CreateBudgetRequest,
    CreateReservationRequest,
    CreateTenantRequest,
    CreateWebhookEndpointRequest,
    CreatedTenant,
    CurrentPeriod,
    EmptyRequest,
    EventPage,
    EventType,
    ExtendRequest,
    FieldError,
    LedgerEntry,
    LedgerEntryPage,
    MovementRequest,
    PeriodCalendar,
    PeriodCalendarRequest,
    PeriodCalendarRequestInterval,
    PeriodFixed,
    PeriodFixedRequest,
    PeriodStatement,
    PeriodStatementPage,
    ReleaseRequest,
    ReleasedReservation,
    Reservation,
    ReservationPage,
    Tenant,
    TenantCreatedEvent,
    TenantPage,
    TenantTombstonedEvent,
    TombstonedTenant,
    WebhookDelivery,
    WebhookDeliveryPage,
    WebhookEndpoint,
    WebhookEndpointPage,
    WebhookEndpointPatch,
    WebhookEndpointWithSecret,
    WebhookEventType,
)

passed = 0

# The page whose Python block this script runs as written (docs/batches.md).
BATCHES_PAGE = Path(__file__).resolve().parents[2] / "docs" / "batches.md"
# A reservation id that names no reservation.
NO_RESERVATION = "res_01M81B5HBV8R5WQ3T6VZ2M9K4X"


def step(what, answer, model, **fields):
    """`answer` must be an instance of `model` whose attributes hold `fields`."""
    global passed
    if not isinstance(answer, model):
        sys.exit(f"FAIL {what}: expected {model.__name__}, got {type(answer).__name__}: {answer!r}")
    for name, want in fields.items():
        got = getattr(answer, name)
        got = getattr(got, "value", got)
        if got != want:
            sys.exit(f"FAIL {what}: {model.__name__}.{name} is {got!r}, not {want!r}")
    passed += 1
    print(f"ok   {what}: {model.__name__}")


def problem(what, answer, status, code):
    """An error answer: the generated model of that operation and status, with this code."""
    name = type(answer).__name__
    if not name.endswith(f"Response{status}"):
        sys.exit(f"FAIL {what}: expected the {status} problem model, got {name}: {answer!r}")
    step(what, answer, type(answer), status=status, code=code, type_="about:blank")


class Receiver(BaseHTTPRequestHandler):
    """A webhook receiver that takes every delivery (204) and says nothing."""

    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length", "0")))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args):
        pass


def first_attempt(admin, endpoint_id, event_id):
    """The endpoint's delivery of the event once an attempt has ended (the sender looks every
    100 ms); fails after 10 s."""
    for _ in range(100):
        page = list_webhook_deliveries.sync(endpoint_id, client=admin, event_id=event_id)
        if isinstance(page, WebhookDeliveryPage) and page.data and page.data[0].attempts >= 1:
            return page
        time.sleep(0.1)
    sys.exit(f"FAIL the delivery of {event_id}: no attempt within 10 s: {page!r}")


def fail(what, why):
    sys.exit(f"FAIL {what}: {why}")


def results(what, answer, expected):
    """`answer.results` must hold one BatchResult per row of `expected`, each a (status, model,
    fields) of its body; `None` for the model of a 424's body."""
    got = answer.results
    if len(got) != len(expected):
        fail(what, f"{len(expected)} results expected, {len(got)} came: {got!r}")
    for i, (result, (status, model, fields)) in enumerate(zip(got, expected)):
        step(f"{what}, operation {i}", result, BatchResult, status=status)
        if model is None:
            if result.body is not None:
                fail(f"{what}, operation {i}", f"a 424's body must be null: {result.body!r}")
        else:
            step(f"{what}, operation {i}'s body", result.body, model, **fields)


def batches(base_url, admin_token, admin, run):
    """Batches (docs/batches.md) of a tenant of their own, through the generated client: each
    result's body parsed into the model of its status, an atomic batch's 409, the key over the
    whole batch, the bounds, and the refusals of the whole request."""
    made = create_tenant.sync(
        client=admin,
        body=CreateTenantRequest(name=f"batch-{run}", opening_deposit_atomic="1000"),
    )
    step("create a tenant for batches", made, CreatedTenant)
    tid, bid = made.id, made.budget.id
    token = made.sidecar_config_env.tenantd_tenant_token
    sidecar = AuthenticatedClient(base_url=base_url, token=token)

    # Not atomic: a charge and a reserve applied, a charge that does not fit refused alone.
    mixed = BatchRequest(
        operations=[
            BatchCharge(op=BatchChargeOp.CHARGE, budget_id=bid, amount_atomic="120", memo="req 81"),
            BatchReserve(
                op=BatchReserveOp.RESERVE, budget_id=bid, amount_atomic="300", ttl_seconds=600
            ),
            BatchCharge(op=BatchChargeOp.CHARGE, budget_id=bid, amount_atomic="5000"),
        ]
    )
    key = f"batch-{run}"
    first = send_batch.sync_detailed(tid, client=sidecar, body=mixed, idempotency_key=key)
    step("a batch", first.parsed, BatchResponse)
    results(
        "a batch",
        first.parsed,
        [
            (201, LedgerEntry, dict(kind="charge", amount_atomic="120", available_atomic="880")),
            (201, Reservation, dict(state="active", amount_atomic="300", budget_id=bid)),
            (
                409,
                BatchItemProblem,
                dict(code="insufficient_funds", budget_id=bid, available_atomic="580"),
            ),
        ],
    )
    if "request_id" in json.loads(first.content)["results"][2]["body"]:
        fail("a batch", "an operation's problem carries a request_id")
    hold = first.parsed.results[1].body.id
    again = send_batch.sync_detailed(tid, client=sidecar, body=mixed, idempotency_key=key)
    step("the batch again, with its key", again.parsed, BatchResponse)
    if again.headers.get("idempotent-replayed") != "true" or again.content != first.content:
        fail("the batch again, with its key", "not the first answer replayed")

    # A tenant token's credit and debit are each that operation's 403; the extend goes.
    mine = send_batch.sync(
        tid,
        client=sidecar,
        body=BatchRequest(
            operations=[
                BatchExtend(op=BatchExtendOp.EXTEND, reservation_id=hold, ttl_seconds=900),
                BatchCredit(op=BatchCreditOp.CREDIT, budget_id=bid, amount_atomic="1000"),
                BatchDebit(op=BatchDebitOp.DEBIT, budget_id=bid, amount_atomic="10"),
            ]
        ),
    )
    step("a tenant token's credit and debit", mine, BatchResponse)
    results(
        "a tenant token's credit and debit",
        mine,
        [
            (200, Reservation, dict(id=hold, state="active")),
            (403, BatchItemProblem, dict(code="forbidden")),
            (403, BatchItemProblem, dict(code="forbidden")),
        ],
    )

    # The admin's atomic batch, every operation applied.
    whole = send_batch.sync(
        tid,
        client=admin,
        body=BatchRequest(
            atomic=True,
            operations=[
                BatchCommit(op=BatchCommitOp.COMMIT, reservation_id=hold, amount_atomic="250"),
                BatchCredit(
                    op=BatchCreditOp.CREDIT, budget_id=bid, amount_atomic="1000", memo="top-up"
                ),
                BatchDebit(op=BatchDebitOp.DEBIT, budget_id=bid, amount_atomic="10"),
            ],
        ),
    )
    step("an atomic batch", whole, BatchResponse)
    results(
        "an atomic batch",
        whole,
        [
            (200, Reservation, dict(id=hold, state="committed", committed_atomic="250")),
            (201, LedgerEntry, dict(kind="credit", amount_atomic="1000", available_atomic="1630")),
            (201, LedgerEntry, dict(kind="debit", amount_atomic="10", available_atomic="1620")),
        ],
    )

    # An atomic batch that fails: 409 batch_failed, 424 for the operations that did not fail,
    # nothing applied.
    failed = send_batch.sync(
        tid,
        client=sidecar,
        body=BatchRequest(
            atomic=True,
            operations=[
                BatchCharge(op=BatchChargeOp.CHARGE, budget_id=bid, amount_atomic="10"),
                BatchCommit(op=BatchCommitOp.COMMIT, reservation_id=hold, amount_atomic="1"),
                BatchRelease(op=BatchReleaseOp.RELEASE, reservation_id=NO_RESERVATION),
                BatchCharge(op=BatchChargeOp.CHARGE, budget_id=bid, amount_atomic="20"),
            ],
        ),
    )
    problem("an atomic batch that fails", failed, 409, "batch_failed")
    results(
        "an atomic batch that fails",
        failed,
        [
            (424, None, {}),
            (409, BatchItemProblem, dict(code="reservation_not_active", state="committed")),
            (404, BatchItemProblem, dict(code="reservation_not_found")),
            (424, None, {}),
        ],
    )
    step(
        "nothing of it applied",
        get_budget.sync(tid, bid, client=sidecar),
        Budget,
        spent_atomic="370",
        reserved_atomic="0",
        available_atomic="1620",
    )

    # The bounds: 1,000 operations go, 1,001 and none are the whole request's 422.
    def charges(n):
        one = BatchCharge(op=BatchChargeOp.CHARGE, budget_id=bid, amount_atomic="1")
        return BatchRequest(operations=[one] * n)

    thousand = send_batch.sync(tid, client=sidecar, body=charges(1000))
    step("a batch of 1,000 charges", thousand, BatchResponse)
    if [r.status for r in thousand.results] != [201] * 1000:
        fail("a batch of 1,000 charges", "not 1,000 results of 201")
    step("the last of them", thousand.results[-1].body, LedgerEntry, available_atomic="620")
    for n in (1001, 0):
        over = send_batch.sync(tid, client=sidecar, body=charges(n))
        problem(f"a batch of {n} operations", over, 422, "validation_failed")
        step(f"a batch of {n} operations: its field", over.errors[0], FieldError,
             field="operations")

    # Refusals of the whole request.
    one = charges(1)
    problem(
        "a batch for no such tenant",
        send_batch.sync("ten_01M81B5HBV8R5WQ3T6VZ2M9K4X", client=admin, body=one),
        404,
        "tenant_not_found",
    )
    problem(
        "a tenant token's batch for another tenant",
        send_batch.sync("ten_01M81B5HBV8R5WQ3T6VZ2M9K4X", client=sidecar, body=one),
        403,
        "forbidden",
    )

    # Answers the typed client cannot provoke, parsed by the same generated code.
    def raw_batch(content):
        headers = {"Authorization": f"Bearer {admin_token}", "Content-Type": "application/json"}
        answer = httpx.post(f"{base_url}/v1/tenants/{tid}/batch", content=content, headers=headers)
        return send_batch._parse_response(client=admin, response=answer)

    unknown = raw_batch(b'{"operations":[{"op":"refund","budget_id":"' + bid.encode() + b'"}]}')
    step("an unknown op", unknown, BatchResponse)
    results("an unknown op", unknown, [(422, BatchItemProblem, dict(code="validation_failed"))])
    step("its field", unknown.results[0].body.errors[0], FieldError, field="op")
    problem("a batch that is not an object", raw_batch(b"[]"), 400, "malformed_json")
    problem(
        "a batch over 1 MiB",
        raw_batch(b'{"operations":[' + b" " * 1_048_576 + b"]}"),
        413,
        "payload_too_large",
    )

    page_example(base_url, admin, run)


def page_example(base_url, admin, run):
    """The Python block of docs/batches.md, run as written for a tenant of its own with the
    environment block it reads; it must print the lines the page shows after it."""
    text = BATCHES_PAGE.read_text()
    block = r"^```python\n(.*?)^```\n\n```text\n(.*?)^```"
    found = re.search(block, text, re.DOTALL | re.MULTILINE)
    if found is None:
        fail("docs/batches.md's Python block", "no ```python block followed by a ```text block")
    code, shown = found.groups()
    made = create_tenant.sync(
        client=admin,
        body=CreateTenantRequest(name=f"batch-page-{run}", opening_deposit_atomic="1000"),
    )
    step("create a tenant for docs/batches.md", made, CreatedTenant)
    env = made.sidecar_config_env
    os.environ.update(
        TENANTD_URL=base_url,
        TENANTD_TENANT_ID=env.tenantd_tenant_id,
        TENANTD_TENANT_TOKEN=env.tenantd_tenant_token,
        TENANTD_BUDGET_ID=env.tenantd_budget_id,
    )
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(code, f"{BATCHES_PAGE}: its python block", "exec"), {"__name__": "page"})
    if printed.getvalue().split("\n") != shown.split("\n"):
        fail("docs/batches.md's Python block", f"printed\n{printed.getvalue()}not\n{shown}")
    step(
        "docs/batches.md's Python block, as written",
        get_budget.sync(made.id, made.budget.id, client=admin),
        Budget,
        spent_atomic="120",
        reserved_atomic="300",
        available_atomic="580",
    )


def main(base_url, admin_token):
    admin = AuthenticatedClient(base_url=base_url, token=admin_token)
    run = uuid.uuid4().hex[:8]

    # Create, read, list.
    created = create_tenant.sync(
        client=admin,
        body=CreateTenantRequest(name=f"acme-{run}", opening_deposit_atomic="1000"),
        idempotency_key=f"create-{run}",
    )
    step("create a tenant", created, CreatedTenant, state="active")
    step("its default budget", created.budget, Budget, available_atomic="1000")
    tid, bid = created.id, created.budget.id
    tenant_token = created.sidecar_config_env.tenantd_tenant_token
    sidecar = AuthenticatedClient(base_url=base_url, token=tenant_token)
    step("read it", get_tenant.sync(tid, client=admin), Tenant, id=tid, state="active")
    step("list tenants", list_tenants.sync(client=admin, limit=1000), TenantPage)
    step("read its budget", get_budget.sync(tid, bid, client=sidecar), Budget, id=bid)

    # Budgets: another one, a credit and a debit, the list and the ledger.
    extra = create_budget.sync(
        tid, client=admin, body=CreateBudgetRequest(name="gpu-hours", opening_deposit_atomic="50")
    )
    step("create a second budget", extra, Budget, name="gpu-hours")
    step(
        "credit",
        credit_budget.sync(tid, bid, client=admin, body=MovementRequest(amount_atomic="500")),
        LedgerEntry,
        kind="credit",
    )
    step(
        "debit",
        debit_budget.sync(tid, bid, client=admin, body=MovementRequest(amount_atomic="100")),
        LedgerEntry,
        kind="debit",
    )
    step("list budgets", list_budgets.sync(tid, client=admin), BudgetPage)
    step("the ledger", list_entries.sync(tid, bid, client=admin), LedgerEntryPage)

    # Spend with the tenant token: reserve, extend, commit below the hold; reserve, release.
    hold = create_reservation.sync(
        tid, client=sidecar, body=CreateReservationRequest(budget_id=bid, amount_atomic="300")
    )
    step("reserve", hold, ActiveReservation, state="active")
    step(
        "extend",
        extend_reservation.sync(tid, hold.id, client=sidecar, body=ExtendRequest(ttl_seconds=600)),
        ActiveReservation,
    )
    step(
        "read the hold",
        get_reservation.sync(tid, hold.id, client=sidecar),
        Reservation,
        state="active",
    )
    step(
        "commit",
        commit_reservation.sync(
            tid, hold.id, client=sidecar, body=CommitRequest(amount_atomic="250")
        ),
        CommittedReservation,
        committed_atomic="250",
    )
    second = create_reservation.sync(
        tid, client=sidecar, body=CreateReservationRequest(budget_id=bid, amount_atomic="10")
    )
    step("reserve again", second, ActiveReservation)
    step(
        "release",
        release_reservation.sync(tid, second.id, client=sidecar, body=ReleaseRequest()),
        ReleasedReservation,
    )
    step("list reservations", list_reservations.sync(tid, client=sidecar), ReservationPage)
    step(
        "the budget after",
        get_budget.sync(tid, bid, client=admin),
        Budget,
        spent_atomic="250",
        reserved_atomic="0",
        available_atomic="1150",
    )

    # Periods, alert thresholds and charges: a budget renewed every month in Berlin, made
    # fixed-length (every hour) by a PATCH, then charged with the tenant token.
    monthly = create_budget.sync(
        tid,
        client=admin,
        body=CreateBudgetRequest(
            name="monthly",
            opening_deposit_atomic="5000",
            period=PeriodCalendarRequest(
                interval=PeriodCalendarRequestInterval.MONTH,
                time_zone="Europe/Berlin",
                allowance_atomic="5000",
            ),
            alert_thresholds_atomic=["1000", "0"],
        ),
    )
    step("create a monthly budget", monthly, Budget, alert_thresholds_atomic=["1000", "0"])
    step(
        "its period",
        monthly.period,
        PeriodCalendar,
        interval="month",
        time_zone="Europe/Berlin",
        allowance_atomic="5000",
        rollover_max_atomic="0",
    )
    step("its current period", monthly.current_period, CurrentPeriod)
    mid, first = monthly.id, monthly.current_period.id
    step(
        "read it back",
        get_budget.sync(tid, mid, client=sidecar),
        Budget,
        current_period=monthly.current_period,
    )

    # The PATCH goes as application/merge-patch+json, named here rather than left to the
    # generated client (which may send either media type), its body made by the model.
    def raw_patch(budget_id, patch, content_type):
        headers = {"Authorization": f"Bearer {admin_token}", "Content-Type": content_type}
        answer = httpx.patch(
            f"{base_url}/v1/tenants/{tid}/budgets/{budget_id}",
            content=json.dumps(patch.to_dict()).encode(),
            headers=headers,
        )
        return update_budget._parse_response(client=admin, response=answer)

    hourly = raw_patch(
        mid,
        BudgetPatch(period=PeriodFixedRequest(every_seconds=3600, allowance_atomic="5000")),
        "application/merge-patch+json",
    )
    step(
        "make it hourly",
        hourly,
        Budget,
        available_atomic="5000",
        alert_thresholds_atomic=["1000", "0"],
    )
    step(
        "its new period",
        hourly.period,
        PeriodFixed,
        every_seconds=3600,
        allowance_atomic="5000",
        rollover_max_atomic="0",
    )
    step("a new current period", hourly.current_period, CurrentPeriod)
    current = hourly.current_period.id
    if current == first:
        sys.exit(f"FAIL make it hourly: the current period is still {first}")
    charge = create_charge.sync(
        tid,
        client=sidecar,
        body=ChargeRequest(budget_id=mid, amount_atomic="300", memo="render job 7781"),
        idempotency_key=f"charge-{run}",
    )
    step(
        "charge",
        charge,
        LedgerEntry,
        kind="charge",
        amount_atomic="300",
        available_atomic="4700",
        period_id=current,
    )
    step(
        "read the entry alone",
        get_entry.sync(tid, mid, charge.id, client=sidecar),
        LedgerEntry,
        id=charge.id,
        kind="charge",
        period_id=current,
    )
    periods = list_periods.sync(tid, mid, client=sidecar)
    step("its period statements", periods, PeriodStatementPage, has_more=False)
    if len(periods.data) != 2:
        sys.exit(f"FAIL its period statements: two expected: {periods.data!r}")
    step(
        "the period the PATCH ended",
        periods.data[0],
        PeriodStatement,
        id=first,
        state="closed",
        forfeited_atomic="0",
        carried_out_atomic="5000",
        closing_available_atomic="5000",
    )
    step(
        "the current period",
        periods.data[1],
        PeriodStatement,
        id=current,
        state="current",
        opening_available_atomic="5000",
        spent_atomic="300",
        closing_available_atomic=None,
    )

    # Events: every change above wrote one (charges, holds and settlements write none).
    credited = list_events.sync(client=admin, type_=EventType.BUDGET_CREDITED, tenant_id=tid)
    step("list the credits' events", credited, EventPage, has_more=False)
    if len(credited.data) != 1:
        sys.exit(f"FAIL list the credits' events: one expected: {credited.data!r}")
    step(
        "the credit's event",
        credited.data[0],
        BudgetMovementEvent,
        type_="budget.credited",
        tenant_id=tid,
    )
    step("its entry", credited.data[0].data.entry, LedgerEntry, kind="credit", amount_atomic="500")
    evt = credited.data[0].id
    step("read the event alone", get_event.sync(evt, client=admin), BudgetMovementEvent, id=evt)
    own = list_tenant_events.sync(tid, client=sidecar)
    step("the tenant's events, with its own token", own, EventPage, has_more=False)
    kinds = [e.type_.value for e in own.data]
    expected = ["tenant.created", "budget.created", "budget.credited", "budget.debited",
                "budget.created", "budget.updated"]
    if kinds != expected:
        sys.exit(f"FAIL the tenant's events: {kinds!r}, not {expected!r}")
    step("the first, its creation", own.data[0], TenantCreatedEvent, tenant_id=tid)
    step("its tenant", own.data[0].data.tenant, Tenant, id=tid)
    first_at = own.data[0].created_at
    later = list_events.sync(client=admin, tenant_id=tid, created_after=first_at)
    step("the events after the first", later, EventPage)
    if [e.id for e in later.data] != [e.id for e in own.data if e.created_at > first_at]:
        sys.exit(f"FAIL created_after: {[e.id for e in later.data]!r}")
    step(
        "the PATCH's event",
        list_tenant_events.sync(tid, client=sidecar, type_=EventType.BUDGET_UPDATED).data[0],
        BudgetEvent,
        type_="budget.updated",
    )

    # A webhook endpoint for this tenant's credits, at a receiver on 127.0.0.1.
    receiver = HTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=receiver.serve_forever, daemon=True).start()
    hook_url = f"http://127.0.0.1:{receiver.server_address[1]}/tenantd/{run}"
    hook_body = CreateWebhookEndpointRequest(
        url=hook_url,
        event_types=[WebhookEventType.BUDGET_DEBITED, WebhookEventType.BUDGET_CREDITED],
        tenant_id=tid,
        description="billing",
    )
    hook = create_webhook_endpoint.sync(client=admin, body=hook_body, idempotency_key=f"hook-{run}")
    step(
        "create a webhook endpoint",
        hook,
        WebhookEndpointWithSecret,
        url=hook_url,
        event_types=["budget.credited", "budget.debited"],
        tenant_id=tid,
        state="enabled",
        disabled_reason=None,
    )
    if not hook.secret.startswith("whsec_"):
        sys.exit(f"FAIL create a webhook endpoint: the secret is {hook.secret[:6]!r}…")
    whe = hook.id
    replayed = create_webhook_endpoint.sync(
        client=admin, body=hook_body, idempotency_key=f"hook-{run}"
    )
    step("replay the create", replayed, WebhookEndpointWithSecret, id=whe, secret=hook.secret)
    read = get_webhook_endpoint.sync(whe, client=admin)
    step("read it", read, WebhookEndpoint, id=whe, description="billing")
    if b"secret" in get_webhook_endpoint.sync_detailed(whe, client=admin).content:
        sys.exit("FAIL read it: the secret is shown")
    endpoints = list_webhook_endpoints.sync(client=admin, limit=1000)
    step("list endpoints", endpoints, WebhookEndpointPage)

    # A credit (to the second budget) writes its event, delivered to the endpoint.
    topup = credit_budget.sync(tid, extra.id, client=admin, body=MovementRequest(amount_atomic="7"))
    step("credit again", topup, LedgerEntry, kind="credit")
    evt = list_events.sync(client=admin, type_=EventType.BUDGET_CREDITED, tenant_id=tid).data[-1].id
    page = first_attempt(admin, whe, evt)
    step("its delivery", page, WebhookDeliveryPage, has_more=False)
    delivery = page.data[0]
    step("the delivery", delivery, WebhookDelivery, endpoint_id=whe, event_id=evt,
         event_type="budget.credited")
    whd = delivery.id
    retried = retry_webhook_delivery.sync(whe, whd, client=admin, body=EmptyRequest())
    step("retry it", retried, WebhookDelivery, id=whd, state="pending")
    problem(
        "retry no such delivery",
        retry_webhook_delivery.sync(whe, "whd_01M81B5HBV8R5WQ3T6VZ2M9K4X", client=admin),
        404,
        "delivery_not_found",
    )

    # Change it, rotate its secret, disable it, enable it, delete it.
    changed = update_webhook_endpoint.sync(
        whe,
        client=admin,
        body=WebhookEndpointPatch(event_types=[WebhookEventType.VALUE_10], description=None),
    )
    step("patch it", changed, WebhookEndpoint, event_types=["*"], description=None)
    rotated = rotate_webhook_endpoint_secret.sync(
        whe, client=admin, idempotency_key=f"rotate-{run}"
    )
    step("rotate its secret", rotated, WebhookEndpointWithSecret, id=whe)
    if rotated.secret == hook.secret or not rotated.secret.startswith("whsec_"):
        sys.exit("FAIL rotate its secret: not a new secret")
    off = update_webhook_endpoint.sync(whe, client=admin, body=WebhookEndpointPatch(enabled=False))
    step("disable it", off, WebhookEndpoint, state="disabled", disabled_reason="manual")
    problem(
        "retry on a disabled endpoint",
        retry_webhook_delivery.sync(whe, whd, client=admin, body=EmptyRequest()),
        409,
        "webhook_endpoint_disabled",
    )
    on = update_webhook_endpoint.sync(whe, client=admin, body=WebhookEndpointPatch(enabled=True))
    step("enable it", on, WebhookEndpoint, state="enabled", disabled_reason=None)
    deleted = delete_webhook_endpoint.sync(whe, client=admin)
    step("delete it", deleted, WebhookEndpoint, state="deleted")
    receiver.shutdown()

    # Every error kind the walk-through can meet, each parsed into its model.
    stranger = AuthenticatedClient(base_url=base_url, token="tkn_01M81B5HBV8R5WQ3T6VZ2M9K4X_" + "0" * 64)
    problem("no such token", get_tenant.sync(tid, client=stranger), 401, "unauthorized")
    problem("a tenant token on the list", list_tenants.sync(client=sidecar), 403, "forbidden")
    problem(
        "no such tenant",
        get_tenant.sync("ten_01M81B5HBV8R5WQ3T6VZ2M9K4X", client=admin),
        404,
        "tenant_not_found",
    )
    problem(
        "no such budget",
        get_budget.sync(tid, "bud_01M81B5HBV8R5WQ3T6VZ2M9K4X", client=admin),
        404,
        "budget_not_found",
    )
    problem(
        "no such reservation",
        get_reservation.sync(tid, "res_01M81B5HBV8R5WQ3T6VZ2M9K4X", client=admin),
        404,
        "reservation_not_found",
    )
    problem(
        "no such ledger entry",
        get_entry.sync(tid, mid, "ent_01M81B5HBV8R5WQ3T6VZ2M9K4X", client=admin),
        404,
        "entry_not_found",
    )
    problem(
        "no such event",
        get_event.sync("evt_01M81B5HBV8R5WQ3T6VZ2M9K4X", client=admin),
        404,
        "event_not_found",
    )
    problem(
        "a deleted webhook endpoint",
        get_webhook_endpoint.sync(whe, client=admin),
        404,
        "webhook_endpoint_not_found",
    )
    problem(
        "its deliveries",
        list_webhook_deliveries.sync(whe, client=admin),
        404,
        "webhook_endpoint_not_found",
    )
    problem(
        "a tenant token on every tenant's events",
        list_events.sync(client=sidecar),
        403,
        "forbidden",
    )
    problem(
        "a webhook endpoint for no such tenant",
        create_webhook_endpoint.sync(
            client=admin,
            body=CreateWebhookEndpointRequest(
                url=hook_url, tenant_id="ten_01M81B5HBV8R5WQ3T6VZ2M9K4X"
            ),
        ),
        422,
        "validation_failed",
    )
    problem(
        "a taken name",
        create_tenant.sync(
            client=admin, body=CreateTenantRequest(name=f"acme-{run}", opening_deposit_atomic="1")
        ),
        409,
        "tenant_name_taken",
    )
    over = create_reservation.sync(
        tid, client=sidecar, body=CreateReservationRequest(budget_id=bid, amount_atomic="99999")
    )
    problem("more than is available", over, 409, "insufficient_funds")
    step("its available_atomic", over, type(over), available_atomic="1150")
    too_much = create_charge.sync(
        tid, client=sidecar, body=ChargeRequest(budget_id=mid, amount_atomic="99999")
    )
    problem("a charge larger than is available", too_much, 409, "insufficient_funds")
    step("its available_atomic", too_much, type(too_much), available_atomic="4700")
    settled = commit_reservation.sync(
        tid, hold.id, client=sidecar, body=CommitRequest(amount_atomic="1")
    )
    problem("a settled hold", settled, 409, "reservation_not_active")
    step("its state", settled, type(settled), state="committed")
    invalid = create_tenant.sync(
        client=admin, body=CreateTenantRequest(name=" padded ", opening_deposit_atomic="01")
    )
    problem("invalid fields", invalid, 422, "validation_failed")
    if len(invalid.errors) != 2:
        sys.exit(f"FAIL invalid fields: two errors expected: {invalid.errors!r}")
    offset = update_budget.sync(
        tid,
        mid,
        client=admin,
        body=BudgetPatch(
            period=PeriodCalendarRequest(
                interval=PeriodCalendarRequestInterval.DAY, time_zone="+02:00", allowance_atomic="1"
            )
        ),
    )
    problem("an offset for a time zone", offset, 422, "validation_failed")
    if len(offset.errors) != 1:
        sys.exit(f"FAIL an offset for a time zone: one error expected: {offset.errors!r}")
    step("its nested field", offset.errors[0], FieldError, field="period.time_zone")
    problem(
        "a bad list query",
        list_tenants.sync(client=admin, limit=0),
        400,
        "invalid_query",
    )
    problem(
        "a bad events query",
        list_tenant_events.sync(tid, client=sidecar, limit=1001),
        400,
        "invalid_query",
    )

    problem(
        "a malformed Idempotency-Key",
        credit_budget.sync(
            tid, bid, client=admin, body=MovementRequest(amount_atomic="1"), idempotency_key="a b"
        ),
        400,
        "invalid_header",
    )
    problem(
        "a key reused with another body",
        create_tenant.sync(
            client=admin,
            body=CreateTenantRequest(name=f"other-{run}", opening_deposit_atomic="1000"),
            idempotency_key=f"create-{run}",
        ),
        422,
        "idempotency_key_mismatch",
    )
    problem(
        "a taken budget name",
        create_budget.sync(
            tid, client=admin, body=CreateBudgetRequest(name="gpu-hours", opening_deposit_atomic="1")
        ),
        409,
        "budget_name_taken",
    )
    u128_max = str(2**128 - 1)
    problem(
        "a credit past u128",
        credit_budget.sync(tid, bid, client=admin, body=MovementRequest(amount_atomic=u128_max)),
        409,
        "amount_overflow",
    )

    # Close the second budget, tombstone the tenant; both stay readable, frozen.
    step(
        "close a budget",
        close_budget.sync(tid, extra.id, client=admin),
        ClosedBudget,
        state="closed",
    )
    problem(
        "a credit to a closed budget",
        credit_budget.sync(tid, extra.id, client=admin, body=MovementRequest(amount_atomic="1")),
        409,
        "budget_closed",
    )
    gone = tombstone_tenant.sync(tid, client=admin)
    step("tombstone", gone, TombstonedTenant, state="tombstoned")
    step("its budget closed", gone.budget, ClosedBudget, state="closed")
    step("tombstone again", tombstone_tenant.sync(tid, client=admin), TombstonedTenant)
    gone_events = list_tenant_events.sync(tid, client=admin, type_=EventType.TENANT_TOMBSTONED)
    step("its one tombstone event", gone_events, EventPage, has_more=False)
    step("the tombstone's event", gone_events.data[0], TenantTombstonedEvent, tenant_id=tid)
    step("its tenant", gone_events.data[0].data.tenant, TombstonedTenant, state="tombstoned")
    problem("the dead tenant's token", get_tenant.sync(tid, client=sidecar), 401, "unauthorized")
    problem(
        "a credit after the tombstone",
        credit_budget.sync(tid, bid, client=admin, body=MovementRequest(amount_atomic="1")),
        409,
        "tenant_tombstoned",
    )

    # Answers the typed client cannot provoke, parsed by the same generated code.
    def raw_create(content, content_type):
        headers = {"Authorization": f"Bearer {admin_token}", "Content-Type": content_type}
        answer = httpx.post(f"{base_url}/v1/tenants", content=content, headers=headers)
        return create_tenant._parse_response(client=admin, response=answer)

    problem("malformed JSON", raw_create(b"{not json", "application/json"), 400, "malformed_json")
    problem("not JSON at all", raw_create(b"name=x", "text/plain"), 415, "unsupported_media_type")
    problem(
        "a body over 64 KiB",
        raw_create(b" " * 70_000, "application/json"),
        413,
        "payload_too_large",
    )

    batches(base_url, admin_token, admin, run)
    print(f"{passed} passed, 0 failed")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
