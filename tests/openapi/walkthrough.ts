// The shapes of docs/api.md's walk-through, typed by the declarations openapi-typescript generates
// from openapi.json (./schema.d.ts beside this file when it is checked): `tsc --noEmit`
// must accept it, and each `@ts-expect-error` line must still be an error.
import type { components, operations } from "./schema";

type Schemas = components["schemas"];
type Json<T> = T extends { content: { "application/json": infer B } } ? B : never;
type Problem<T> = T extends { content: { "application/problem+json": infer B } } ? B : never;

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

export { available, body, frozen, isTaken, numeric, page, settle, sidecarEnv, whyRefused };
