// The shapes of docs/api.md's walk-through, typed by the declarations openapi-typescript generates
// from openapi.json (./schema.d.ts beside this file when it is checked): `tsc --noEmit`
// must accept it, and each `@ts-expect-error` line must still be an error.
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

export {
  available,
  body,
  both,
  carried,
  charged,
  cleared,
  frozen,
  hourly,
  isFrozen,
  isTaken,
  monthly,
  numeric,
  page,
  renamed,
  renews,
  settle,
  sidecarEnv,
  whyNotCharged,
  whyRefused,
};
