// The shapes of docs/api.md's, docs/webhooks.md's and docs/batches.md's walk-throughs, typed by
// the declarations openapi-typescript generates from openapi.json (./schema.d.ts beside this
// file when it is checked): `tsc --noEmit` must accept it, and each `@ts-expect-error` line
// must still be an error.
import type { components, operations } from "./schema";

type Schemas = components["schemas"];
type Json<T> = T extends { content: { "application/json": infer B } } ? B : never;
type Problem<T> = T extends { content: { "application/problem+json": infer B } } ? B : never;
type MergePatch<T> = T extends { content: { "application/merge-patch+json": infer B } } ? B : never;

type CreateTenant = operations["createTenant"];
type CreateBody = Json<CreateTenant["requestBody"]>;
type Created = Json<CreateTenant["responses"][201]>;
type NameTaken = Problem<CreateTenant["responses"][409]>;
type Reserve = operations["createReservation"];
type Hold = Json<Reserve["responses"][201]>;
type Refused = Problem<Reserve["responses"][409]>;
type Commit = operations["commitReservation"];
type Committed = Json<Commit["responses"][200]>;
type Tombstoned = Json<operations["tombstoneTenant"]["responses"][200]>;
type CreateBudgetBody = Json<operations["createBudget"]["requestBody"]>;
type Budget = Json<operations["getBudget"]["responses"][200]>;
type UpdateBudget = operations["updateBudget"];
type PatchBody = MergePatch<UpdateBudget["requestBody"]>;
type PatchRefused = Problem<UpdateBudget["responses"][409]>;
type Charge = operations["createCharge"];
type Charged = Json<Charge["responses"][201]>;
type ChargeRefused = Problem<Charge["responses"][409]>;
type Entry = Json<operations["getEntry"]["responses"][200]>;
type NoEntry = Problem<operations["getEntry"]["responses"][404]>;
type Statements = Json<operations["listPeriods"]["responses"][200]>;
type Events = Json<operations["listEvents"]["responses"][200]>;
type EventsQuery = NonNullable<operations["listEvents"]["parameters"]["query"]>;
type TenantEventsQuery = NonNullable<operations["listTenantEvents"]["parameters"]["query"]>;
type AnEvent = Json<operations["getEvent"]["responses"][200]>;
type NoEvent = Problem<operations["getEvent"]["responses"][404]>;
type CreateHook = operations["createWebhookEndpoint"];
type CreateHookBody = Json<CreateHook["requestBody"]>;
type HookWithSecret = Json<CreateHook["responses"][201]>;
type Hook = Json<operations["getWebhookEndpoint"]["responses"][200]>;
type NoHook = Problem<operations["getWebhookEndpoint"]["responses"][404]>;
type Hooks = Json<operations["listWebhookEndpoints"]["responses"][200]>;
type HookPatch = MergePatch<operations["updateWebhookEndpoint"]["requestBody"]>;
type Rotated = Json<operations["rotateWebhookEndpointSecret"]["responses"][200]>;
type Deleted = Json<operations["deleteWebhookEndpoint"]["responses"][200]>;
type Deliveries = Json<operations["listWebhookDeliveries"]["responses"][200]>;
type Retry = operations["retryWebhookDelivery"];
type Retried = Json<Retry["responses"][202]>;
type RetryRefused = Problem<Retry["responses"][409]>;
type SendBatch = operations["sendBatch"];
type BatchBody = Json<SendBatch["requestBody"]>;
type BatchDone = Json<SendBatch["responses"][200]>;
type BatchFailed = Problem<SendBatch["responses"][409]>;
type BatchTooLarge = Problem<SendBatch["responses"][413]>;
type BatchResult = Schemas["BatchResult"];

const body: CreateBody = { name: "acme-prod", opening_deposit_atomic: "1000" };

// @ts-expect-error amounts are strings of digits, never numbers
const numeric: CreateBody = { name: "acme-prod", opening_deposit_atomic: 1000 };

function sidecarEnv(created: Created): string {
  const env = created.sidecar_config_env;
  return `TENANTD_URL=${env.TENANTD_URL}\nTENANTD_TENANT_TOKEN=${env.TENANTD_TENANT_TOKEN}\n`;
}

function available(created: Created): string {
  return created.budget.available_atomic;
}

function whyRefused(problem: Refused): string {
  switch (problem.code) {
    case "insufficient_funds":
      return `only ${problem.available_atomic ?? "?"} available`;
    case "budget_closed":
    case "tenant_tombstoned":
      return "closed";
    default:
      return problem.detail;
  }
}

function isTaken(problem: NameTaken): boolean {
  // @ts-expect-error a tenant create's 409 is never insufficient_funds
  const never: NameTaken["code"] = "insufficient_funds";
  return problem.code === "tenant_name_taken" && never !== problem.code;
}

function settle(hold: Hold, committed: Committed): string {
  const state: "active" = hold.state;
  const done: "committed" = committed.state;
  return `${hold.id} ${state} -> ${done} ${committed.committed_atomic}`;
}

function frozen(gone: Tombstoned): string {
  const closed: "closed" = gone.budget.state;
  return `${gone.tombstoned_at} ${closed}`;
}

const page: Schemas["TenantPage"] = { data: [], has_more: false, next_after: null };

const monthly: CreateBudgetBody = {
  name: "monthly",
  opening_deposit_atomic: "5000",
  period: { interval: "month", time_zone: "Europe/Berlin", allowance_atomic: "5000" },
  alert_thresholds_atomic: ["1000", "0"],
};

const hourly: PatchBody = { period: { every_seconds: 3600, allowance_atomic: "5000" } };

const cleared: PatchBody = { period: null, alert_thresholds_atomic: null };

// @ts-expect-error a period is a calendar one or a fixed-length one, never both
const both: PatchBody = { period: { interval: "day", every_seconds: 60, allowance_atomic: "1" } };

// @ts-expect-error a PATCH changes the period and the thresholds, nothing else
const renamed: PatchBody = { name: "other" };

function renews(budget: Budget): string {
  const period = budget.period;
  if (period === null) {
    return "never";
  }
  const next = budget.current_period?.ends_at ?? "-";
  const alerts = budget.alert_thresholds_atomic.join(", ");
  if ("every_seconds" in period) {
    return `every ${period.every_seconds} s, next at ${next}, alerts at ${alerts}`;
  }
  return `every ${period.interval} in ${period.time_zone}, next at ${next}, alerts at ${alerts}`;
}

function charged(entry: Charged, alone: Entry): string {
  const kinds: Entry["kind"][] = ["charge", "refill", "forfeit"];
  const renewal = kinds.includes(alone.kind) && alone.kind !== "charge";
  return `${entry.id} ${entry.amount_atomic} in ${entry.period_id ?? "no period"} ${renewal}`;
}

function carried(statements: Statements): string | null {
  const closed = statements.data.find((s) => s.state === "closed");
  return closed ? closed.carried_out_atomic : null;
}

function whyNotCharged(problem: ChargeRefused): string {
  switch (problem.code) {
    case "insufficient_funds":
      return `only ${problem.available_atomic ?? "?"} available`;
    default:
      return problem.detail;
  }
}

function isFrozen(problem: PatchRefused, missing: NoEntry): boolean {
  // @ts-expect-error a PATCH's 409 is never insufficient_funds
  const never: PatchRefused["code"] = "insufficient_funds";
  const closed = problem.code === "budget_closed" || never === problem.code;
  return closed && missing.code === "entry_not_found";
}

// Events: `type` decides what `data` holds.
function whatHappened(event: AnEvent): string {
  switch (event.type) {
    case "budget.available_low":
      return `${event.data.budget.available_atomic} left, below ${event.data.threshold_atomic}`;
    case "budget.credited":
    case "budget.debited":
      // @ts-expect-error a credit's event names no threshold
      return `${event.data.entry.amount_atomic} ${event.data.threshold_atomic}`;
    case "budget.period_reset":
      return `${event.data.closed_period.forfeited_atomic ?? "0"} lost, ${event.data.entry.kind}`;
    case "reservation.expired":
      return `${event.data.reservation.amount_atomic} back to ${event.data.budget.id}`;
    case "tenant.created":
    case "tenant.tombstoned":
      return event.data.tenant.name;
    default:
      return `${event.type} ${event.data.budget.state}`;
  }
}

function lastSeen(page: Events): string | null {
  return page.has_more ? page.next_after : (page.data.at(-1)?.id ?? null);
}

const lowOnes: EventsQuery = {
  type: "budget.available_low",
  tenant_id: "ten_01M8BTW9KN3VGPS6YJK7T41EMJ",
  created_after: "2026-11-26T11:47:00Z",
  after: "evt_01M8BTWJR6ZWDPZGF4M9BEGVB8",
};

// @ts-expect-error an event type is one of the list
const spent: EventsQuery = { type: "budget.spent" };

// @ts-expect-error a tenant's events take no tenant_id filter
const mine: TenantEventsQuery = { tenant_id: "ten_01M8BTW9KN3VGPS6YJK7T41EMJ" };

// Webhooks: an endpoint from creation to deletion.
const hook: CreateHookBody = {
  url: "https://hooks.example.com/tenantd",
  event_types: ["budget.available_low", "budget.period_reset"],
  tenant_id: null,
  description: "billing",
};

const everything: CreateHookBody = { url: "https://hooks.example.com/all", event_types: ["*"] };

// @ts-expect-error the secret is made by the server, never sent
const chosen: CreateHookBody = { url: "https://hooks.example.com/tenantd", secret: "whsec_x" };

function keepSecret(created: HookWithSecret, rotated: Rotated): [string, string] {
  return [created.secret, rotated.secret];
}

function leak(endpoint: Hook): string {
  // @ts-expect-error a read endpoint has no secret
  return endpoint.secret;
}

function health(endpoints: Hooks): string[] {
  return endpoints.data.map((e) =>
    e.state === "disabled" ? `${e.id} off (${e.disabled_reason ?? "?"})` : `${e.id} ${e.state}`,
  );
}

const disable: HookPatch = { enabled: false };

const reset: HookPatch = { event_types: null, tenant_id: null, description: null };

// @ts-expect-error a URL cannot be cleared
const noUrl: HookPatch = { url: null };

function failing(deliveries: Deliveries): string[] {
  return deliveries.data
    .filter((d) => d.state !== "succeeded")
    .map((d) => `${d.event_id}: ${d.last_error ?? "not tried"} (${d.last_status ?? "no status"})`);
}

function queued(retried: Retried): "pending" | "succeeded" | "failed" {
  return retried.state;
}

function whyNotRetried(problem: RetryRefused, missing: NoHook, gone: NoEvent): boolean {
  // @ts-expect-error a retry's 409 is never insufficient_funds
  const never: RetryRefused["code"] = "insufficient_funds";
  return (
    (problem.code === "webhook_endpoint_disabled" || never === problem.code) &&
    missing.code === "webhook_endpoint_not_found" &&
    gone.code === "event_not_found"
  );
}

function final(deleted: Deleted): boolean {
  return deleted.state === "deleted" && deleted.disabled_reason === null;
}

// Batches: many operations of one tenant in one request, each the body of its single call
// plus op.
const bud = "bud_01M8KYWVYFJD0X0XJ8MEQ36825";
const batch: BatchBody = {
  atomic: false,
  operations: [
    { op: "charge", budget_id: bud, amount_atomic: "120", memo: "req 81" },
    { op: "reserve", budget_id: bud, amount_atomic: "300", ttl_seconds: 600 },
    { op: "commit", reservation_id: "res_01M8KYWW4VFFFC3HDNGYW7K5V7", amount_atomic: "250" },
    { op: "release", reservation_id: "res_01M8KYWW4VFFFC3HDNGYW7K5V8" },
    { op: "extend", reservation_id: "res_01M8KYWW4VFFFC3HDNGYW7K5V9", ttl_seconds: 900 },
    { op: "credit", budget_id: bud, amount_atomic: "1000" },
    { op: "debit", budget_id: bud, amount_atomic: "10" },
  ],
};

const misnamed: BatchBody = {
  atomic: true,
  // @ts-expect-error a commit names its reservation, not a budget
  operations: [{ op: "commit", budget_id: bud, amount_atomic: "1" }],
};

const refund: BatchBody = {
  atomic: false,
  // @ts-expect-error op is one of the seven
  operations: [{ op: "refund", budget_id: bud, amount_atomic: "1" }],
};

// Each result's body is the single call's answer: an entry, a reservation, a problem, or null
// (424: not applied, because the atomic batch failed).
function outcome(result: BatchResult): string {
  const body = result.body;
  if (body === null) {
    return `${result.status}: not applied`;
  }
  if ("code" in body) {
    const left = body.code === "insufficient_funds" ? `, ${body.available_atomic ?? "?"} left` : "";
    return `${result.status} ${body.code}${left}`;
  }
  if ("kind" in body) {
    return `${result.status} ${body.kind} ${body.amount_atomic}, ${body.available_atomic} left`;
  }
  const state: "active" | "committed" | "released" | "expired" = body.state;
  return `${result.status} reservation ${body.id} ${state}`;
}

function applied(done: BatchDone): number {
  return done.results.filter((r) => r.status === 200 || r.status === 201).length;
}

function whyBatchFailed(problem: BatchFailed): string[] {
  // @ts-expect-error a batch's own 409 is never an operation's insufficient_funds
  const never: BatchFailed["code"] = "insufficient_funds";
  const failing = (problem.results ?? []).filter((r) => r.status !== 424 && never !== problem.code);
  return failing.map(outcome);
}

function tooLarge(problem: BatchTooLarge): boolean {
  return problem.code === "payload_too_large";
}

export {
  applied,
  batch,
  misnamed,
  outcome,
  refund,
  tooLarge,
  whyBatchFailed,
  available,
  body,
  both,
  carried,
  charged,
  chosen,
  cleared,
  disable,
  everything,
  failing,
  final,
  frozen,
  health,
  hook,
  hourly,
  isFrozen,
  isTaken,
  keepSecret,
  lastSeen,
  leak,
  lowOnes,
  mine,
  monthly,
  noUrl,
  numeric,
  page,
  queued,
  renamed,
  renews,
  reset,
  settle,
  sidecarEnv,
  spent,
  whatHappened,
  whyNotCharged,
  whyNotRetried,
  whyRefused,
};
