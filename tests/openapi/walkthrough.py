"""The walk-through of docs/api.md, driven through a client generated from openapi.json by
openapi-python-client: create, read, list, reserve, commit, release, tombstone. Every answer,
every error kind a client can provoke included, must parse into the model the document names
for its status. Left out: 408, 500 and 503 (they need a slow client, a broken disk or a full
queue), 501 (httpx sends no transfer coding but chunked), and 405 and 404 not_found (answers
to no operation of the document).

    python3 walkthrough.py BASE_URL ADMIN_TOKEN   (the generated package on PYTHONPATH)

Prints one line per step and "N passed, 0 failed" at the end; exits 1 at the first failure.
"""

import sys
import uuid

import httpx

from tenantd_client import AuthenticatedClient
from tenantd_client.api.budgets import (
    close_budget,
    create_budget,
    credit_budget,
    debit_budget,
    get_budget,
    list_budgets,
    list_entries,
)
from tenantd_client.api.reservations import (
    commit_reservation,
    create_reservation,
    extend_reservation,
    get_reservation,
    list_reservations,
    release_reservation,
)
from tenantd_client.api.tenants import create_tenant, get_tenant, list_tenants, tombstone_tenant
from tenantd_client.models import (
    ActiveReservation,
    Budget,
    BudgetPage,
    ClosedBudget,
    CommitRequest,
    CommittedReservation,
    CreateBudgetRequest,
    CreateReservationRequest,
    CreateTenantRequest,
    CreatedTenant,
    ExtendRequest,
    LedgerEntry,
    LedgerEntryPage,
    MovementRequest,
    ReleaseRequest,
    ReleasedReservation,
    Reservation,
    ReservationPage,
    Tenant,
    TenantPage,
    TombstonedTenant,
)

passed = 0


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
    problem(
        "a bad list query",
        list_tenants.sync(client=admin, limit=0),
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
    print(f"{passed} passed, 0 failed")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
