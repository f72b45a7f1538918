// The debugger's HTTP API (docs/debugger.md): the response shapes and one
// small client. Every URL is relative, so the page works wherever the server
// mounts it. Responses are data: they are only ever rendered as text.

export type Json = null | boolean | number | string | Json[] | { [k: string]: Json };
export type Obj = { [k: string]: Json };

export interface Info {
  mode: 'file' | 'cluster';
  title: string;
  chains: number;
  approvals: boolean;
  auth: boolean;
  live?: boolean;
  /** can_cancel: the caller may cancel runs here (cluster with an orchestrator). */
  can_cancel?: boolean;
  load_error: null | { file: string; message: string };
}

export interface Tokens {
  input: number;
  output: number;
}

export interface ChainSummary {
  id: string;
  events: number;
  first_timestamp?: string;
  last_timestamp?: string;
  duration_ms?: number;
  agents?: string[];
  status?: string;
  errors?: number;
  tokens?: Tokens;
  cost?: number | null;
  pending_approvals?: number;
  verify_error?: string;
}

export interface ChainList {
  chains: ChainSummary[];
  next_cursor?: string;
}

export interface StepTiming {
  agent: string;
  step: number;
  start_seq: number;
  end_seq?: number;
  intent?: string;
  tool?: string;
  duration_ms: number;
  share: number;
  tool_ms: number;
  unfinished?: boolean;
}

export interface AgentTime {
  agent: string;
  duration_ms: number;
  share: number;
  steps: number;
}

export interface Bottlenecks {
  chain_id?: string;
  steps: StepTiming[];
  all_steps?: number;
  total_ms?: number;
  by_agent?: AgentTime[];
  by_tool?: { tool: string; duration_ms: number; calls: number }[];
  unfinished?: StepTiming[];
  recommendation?: string;
}

export interface Stats {
  chain_id: string;
  events: number;
  duration_ms: number;
  wall_clock_ms?: number;
  tokens: Tokens;
  total_tokens?: number;
  cost: number | null;
  cost_by_model?: { model: string; input: number; output: number; cost: number | null }[];
  // cost_by_agent is shown when the server provides it.
  cost_by_agent?: { agent: string; input?: number; output?: number; cost: number | null }[];
  agents: string[];
  errors: number;
  facts: number;
  avg_confidence: number | null;
  steps: number;
  tool_calls: number;
  unknown_types?: number;
  run_status?: string;
}

export interface ChainDetail {
  id: string;
  events: number;
  first_seq: number;
  last_seq: number;
  duration_ms?: number;
  agents?: string[];
  status?: string;
  verify?: { ok: boolean; first_bad_seq?: number; message?: string };
  stats?: Stats;
  bottlenecks?: Bottlenecks;
  live?: boolean;
  run?: null | { run_id: string; status: string; goal: string; principal: string; message?: string };
  warnings?: string[] | null;
}

export interface LctlEvent {
  chain_id?: string;
  seq: number;
  type: string;
  timestamp: string;
  agent: string;
  data: Obj | null;
  prev_hash?: string;
  hash?: string;
  [extra: string]: Json | undefined;
}

export interface EventPage {
  events: LctlEvent[];
  total: number;
  /** position (from 0, in chain order) of the first event returned. */
  position: number;
}

export type NodeStatus =
  | 'ok'
  | 'error'
  | 'denied'
  | 'needs_approval'
  | 'approved'
  | 'in_doubt'
  | 'pending'
  | string;

export interface Attachment {
  seq: number;
  type: string;
  label: string;
  status?: NodeStatus;
}

export interface FlowNode {
  id: string;
  kind: string;
  seq: number;
  last_seq?: number;
  events?: number;
  agent: string;
  label: string;
  step?: number | null;
  status?: NodeStatus;
  tool?: string;
  gated?: boolean;
  attached?: Attachment[] | null;
  attached_more?: number;
  count?: number;
  type?: string;
  /** lane is the agent whose lane the node is in. */
  lane?: string;
  routing?: Routing[] | null;
  streams?: StreamInfo[] | null;
  handoff?: Handoff | null;
}

/** Routing is a model_routing decision shown on the step it led to. */
export interface Routing {
  seq: number;
  decision: string;
  model: string;
  reason: string;
  rule?: string;
  step_kind?: string;
  failed_model?: string;
  failure_code?: string;
  confidence: number | null;
}

export interface StreamInfo {
  seq: number;
  model: string;
  chunks: number;
  tokens: number | null;
  status: string;
  duration_ms: number | null;
}

export interface ContractResult {
  seq: number;
  contract: string;
  direction: string;
  status: string;
  violations: { subject: string; message: string; rule: string }[] | null;
}

/** Handoff is a handoff a step proposed: passed, refused or checking. */
export interface Handoff {
  seq: number;
  from: string;
  to: string;
  summary: string;
  depth: number | null;
  status: 'passed' | 'refused' | 'checking' | string;
  contracts: ContractResult[] | null;
}

export interface Lane {
  agent: string;
  type: string;
  steps: number;
  nodes: number;
}

export interface FlowEdge {
  from: string;
  to: string;
  kind: 'next' | 'handoff' | string;
  handoff?: Handoff | null;
}

export interface Flow {
  nodes: FlowNode[];
  edges: FlowEdge[];
  lanes?: Lane[] | null;
  total_events: number;
  total_nodes?: number;
  next_from?: number;
}

/** FactAt is a fact of the store as of the selected seq. */
export interface FactAt {
  id: string;
  text: string;
  confidence: number | null;
  band: string;
  blocked: boolean;
  seq: number;
  kind: string;
  assessments: { agent: string; confidence: number; seq: number }[] | null;
  consensus: null | {
    seq: number;
    assessors: string[] | null;
    agreement: number | null;
    consensus_score: number | null;
    conflict_level: number | null;
  };
}

export interface Fact {
  text: string;
  confidence: number | null;
  source: string;
  tags?: string[];
  history?: { seq: number; agent: string; text: string; confidence: number | null; reason: string }[];
}

export interface ToolCallRec {
  seq: number;
  agent: string;
  tool: string;
  step?: number;
  duration_ms: number;
  status?: string;
}

export interface ErrorRec {
  seq: number;
  agent: string;
  step?: number;
  category: string;
  type: string;
  code: string;
  message: string;
  recoverable: boolean;
}

export interface State {
  chain_id: string;
  seq: number;
  event_count: number;
  last_timestamp: string;
  facts: Record<string, Fact>;
  agents: string[];
  current_step: null | { seq: number; agent: string; step?: number; intent: string; tool?: string };
  tool_calls: ToolCallRec[];
  errors: ErrorRec[];
  tokens: Tokens;
  duration_ms: number;
  event_types?: Record<string, number>;
  unknown_types?: number[];
  run?: null | { run_id: string; status: string; goal: string; principal: string; steps: number };
  steps?: Obj[];
}

/** StepView is what happened to the selected event's step, as of seq. */
export interface StepView {
  step: number | null;
  agent: string;
  start_seq: number;
  proposal: LctlEvent | null;
  verdict: LctlEvent | null;
  decision: string;
  rules: string[] | null;
  approval_requested: LctlEvent | null;
  approval_decided: LctlEvent | null;
  result: LctlEvent | null;
  error: LctlEvent | null;
  end: LctlEvent | null;
}

export interface StateAt {
  seq: number;
  event: LctlEvent | null;
  snapshot_from?: number;
  state: State;
  counts?: { tool_calls: number; errors: number; steps: number; unknown_types: number; facts: number };
  step: StepView | null;
  /** cost is the dollars of the tokens up to seq (null: no price table, or
   * nothing priced); unpriced_models have tokens but no price. */
  cost: number | null;
  unpriced_models: string[];
  /** fact_store is the facts at seq: confidence then, assessors, consensus. */
  fact_store?: FactAt[] | null;
}

export interface ConfidencePoint {
  seq: number;
  agent: string;
  kind: string;
  value: number;
  blocked?: boolean;
  reason?: string;
}

export interface FactConfidence {
  id: string;
  text: string;
  points: ConfidencePoint[];
  final: number | null;
  band: string;
  labels: string[];
  blocked_seq?: number;
  consensus?: {
    assessments: { agent: string; confidence: number; weight: number }[];
    score: number;
    conflict: number;
    agreement?: number;
  };
}

export interface ConfidenceReport {
  chain_id: string;
  decay_rate: number;
  hops: number;
  facts: FactConfidence[];
  warnings: string[];
}

export interface EventRef {
  seq: number;
  position: number;
  agent: string;
  type: string;
  subject?: string;
  detail?: string;
}

export interface Difference {
  kind: 'changed' | 'added' | 'removed' | string;
  v1?: EventRef;
  v2?: EventRef;
  fields?: { path: string; v1: Json; v2: Json }[];
}

export interface DiffReport {
  v1: { label: string; chain_id: string; events: number };
  v2: { label: string; chain_id: string; events: number };
  identical: boolean;
  first?: Difference;
  differences: Difference[];
  changed: number;
  added: number;
  removed: number;
  ignored: string[];
  aligned: boolean;
}

// Approval is xct.v1.Approval as protojson: lowerCamelCase names by default,
// the proto names when the server asks for them. Both are read.
export type Approval = Obj;

/** ApiError is an error response of the API, or a failure to reach it. */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

async function decode<T>(res: Response): Promise<T> {
  const text = await res.text();
  let body: unknown = null;
  try {
    body = text ? JSON.parse(text) : null;
  } catch {
    if (!res.ok) throw new ApiError(res.status, 'HTTP_' + res.status, text.slice(0, 300) || res.statusText);
    throw new ApiError(res.status, 'BAD_RESPONSE', 'the server sent something that is not JSON');
  }
  if (!res.ok) {
    const err = (body as { error?: { code?: string; message?: string } } | null)?.error;
    throw new ApiError(res.status, err?.code ?? 'HTTP_' + res.status, err?.message ?? res.statusText);
  }
  return body as T;
}

/** get fetches a JSON resource of the API. */
export async function get<T>(path: string, params?: Record<string, string | number | undefined>, signal?: AbortSignal): Promise<T> {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params ?? {})) {
    if (v !== undefined && v !== '') q.set(k, String(v));
  }
  const url = 'api/' + path + (q.toString() ? '?' + q.toString() : '');
  let res: Response;
  try {
    res = await fetch(url, { signal, headers: authHeaders({ Accept: 'application/json' }), credentials: 'same-origin' });
  } catch (e) {
    if ((e as Error).name === 'AbortError') throw e;
    throw new ApiError(0, 'UNAVAILABLE', 'cannot reach the debugger server');
  }
  return decode<T>(res);
}

const tokenKey = 'xct-debugger-token';

/** token returns the bearer token the user gave this tab, if any. */
export function token(): string {
  try {
    return sessionStorage.getItem(tokenKey) ?? '';
  } catch {
    return '';
  }
}

/** setToken keeps the bearer token for this tab only (sessionStorage). */
export function setToken(t: string): void {
  try {
    if (t) sessionStorage.setItem(tokenKey, t);
    else sessionStorage.removeItem(tokenKey);
  } catch {
    // storage disabled: the token lives as long as the request
  }
}

const sessionKeyStore = 'xct-debugger-session';

/** sessionKey is the key of the debugger session this browser signed in
 * with through a one-time link (docs/debugger.md), when this page is that
 * session's (its path is under the session's base): '' otherwise. The
 * tracer's sign-in answer keeps it in this origin's localStorage
 * (services/tracer/login.js); the session's cookie authenticates nothing
 * without it, so a cookie another origin planted cannot sign the page in. */
export function sessionKey(): string {
  try {
    const s = JSON.parse(localStorage.getItem(sessionKeyStore) ?? 'null') as { base?: unknown; key?: unknown } | null;
    if (s && typeof s.key === 'string' && typeof s.base === 'string' && location.pathname.startsWith(s.base)) return s.key;
  } catch {
    // storage disabled, or not ours
  }
  return '';
}

/** authHeaders adds what names the caller: the bearer token the user gave
 * this tab, and the session's key. */
export function authHeaders(h: Record<string, string>): Record<string, string> {
  const t = token();
  if (t) h['Authorization'] = 'Bearer ' + t;
  const k = sessionKey();
  if (k) h['X-XCT-Session-Key'] = k;
  return h;
}

const approverKey = 'xct-debugger-approver';

/** approverName is the name the user decides under when the server has no
 * authentication (the validator still needs to know who decided). */
export function approverName(): string {
  try {
    return sessionStorage.getItem(approverKey) ?? '';
  } catch {
    return '';
  }
}

export function setApproverName(n: string): void {
  try {
    sessionStorage.setItem(approverKey, n);
  } catch {
    // storage disabled
  }
}

/** decide approves or denies a pending step through the server: the
 * approval of stepId (its step id, never its number: the approval shown is
 * the one decided). */
export async function decide(runId: string, stepId: string, approve: boolean, reason: string, approver: string): Promise<{ approval: Approval }> {
  const headers = authHeaders({
    'Content-Type': 'application/json',
    Accept: 'application/json',
    'X-XCT-CSRF': '1',
  });
  let res: Response;
  try {
    res = await fetch('api/approvals/decide', {
      method: 'POST',
      headers,
      credentials: 'same-origin',
      body: JSON.stringify(approver ? { run_id: runId, step: stepId, approve, reason, approver } : { run_id: runId, step: stepId, approve, reason }),
    });
  } catch {
    throw new ApiError(0, 'UNAVAILABLE', 'cannot reach the debugger server');
  }
  return decode(res);
}

/** cancelRun cancels a running run through the server, as the caller. */
export async function cancelRun(runId: string, reason: string): Promise<{ run_id: string; cancelled: boolean }> {
  const headers = authHeaders({
    'Content-Type': 'application/json',
    Accept: 'application/json',
    'X-XCT-CSRF': '1',
  });
  let res: Response;
  try {
    res = await fetch('api/runs/cancel', {
      method: 'POST',
      headers,
      credentials: 'same-origin',
      body: JSON.stringify({ run_id: runId, reason }),
    });
  } catch {
    throw new ApiError(0, 'UNAVAILABLE', 'cannot reach the debugger server');
  }
  return decode(res);
}

/** pick reads a field of a protojson object under its JSON or proto name. */
export function pick(o: Obj | null | undefined, camel: string, snake?: string): Json | undefined {
  if (!o) return undefined;
  if (camel in o) return o[camel];
  if (snake && snake in o) return o[snake];
  return undefined;
}
