// The state panel: the chain's full materialized state at the selected seq.
// Requests are debounced and cancelled while the user scrubs, so dragging the
// slider over 100,000 events never queues 100,000 requests.
import { useEffect, useState } from 'preact/hooks';
import type { FactAt, Json, LctlEvent, Obj, StateAt, StepView } from './api';
import { get } from './api';
import { ErrorBox, JsonBlock, Status } from './common';
import { band, fmtConf, fmtCost, fmtInt, fmtMs, fmtTime, visible } from './fmt';

/** knownTypes are the event types this page knows how to describe. */
export const knownTypes = new Set([
  'step_start',
  'step_end',
  'fact_added',
  'fact_modified',
  'tool_call',
  'error',
  'checkpoint',
  'contract_validation',
  'model_routing',
  'stream_start',
  'stream_chunk',
  'stream_end',
  'handoff',
  'run_started',
  'verdict',
  'run_finished',
  'approval_requested',
  'approval_decided',
  'rollback_started',
  'rollback_finished',
]);

const shown = 25;

function data(e: LctlEvent | null | undefined): Obj {
  return (e?.data ?? {}) as Obj;
}

function EventRef({ e, label }: { e: LctlEvent; label: string }) {
  return (
    <p class="evref">
      {label} at seq {e.seq} by <strong>{e.agent}</strong>
    </p>
  );
}

/** StepDetail shows the selected step: proposal, verdict with its rules,
 * approval, result and error, as of the selected seq. */
function StepDetail({ step }: { step: StepView }) {
  const prop = step.proposal;
  const pd = data(prop);
  const vd = data(step.verdict);
  const reasons = Array.isArray(vd.reasons) ? (vd.reasons as Json[]) : [];
  // A governed (XCT) step has a number, a verdict or an approval; a step
  // of another framework (a span converted from OpenTelemetry) has none,
  // and shows only what its events say.
  const governed = step.step != null || !!step.verdict || !!step.approval_requested;
  if (!governed) return <SpanDetail step={step} />;
  return (
    <div class="step" id="state-step">
      <h3>
        Step {step.step ?? ''} by {step.agent}
      </h3>
      <h4>Proposal</h4>
      {prop ? (
        <>
          <dl class="kv">
            <dt>Tool</dt>
            <dd>
              <code>{String(pd.tool ?? '—')}</code>
            </dd>
            <dt>Intent</dt>
            <dd>{visible(String(pd.intent ?? '')) || '—'}</dd>
            {pd.confidence != null ? (
              <>
                <dt>Confidence</dt>
                <dd>{String(pd.confidence)}</dd>
              </>
            ) : null}
          </dl>
          <JsonBlock value={(pd.arguments ?? pd.raw ?? pd) as Json} label="Proposed arguments" />
        </>
      ) : (
        <p>No proposal recorded.</p>
      )}
      <h4>Verdict</h4>
      {step.verdict ? (
        <div class="verdict" id="state-verdict">
          <p>
            <Status s={step.decision || String(vd.decision ?? 'pending')} /> at seq {step.verdict.seq}
            {vd.policy_version ? ` (policy ${String(vd.policy_version)})` : ''}
          </p>
          <ul class="rules" aria-label="Matched rules">
            {reasons.length
              ? reasons.map((r, i) => {
                  const o = (r && typeof r === 'object' && !Array.isArray(r) ? r : {}) as Obj;
                  return (
                    <li key={i}>
                      <code>{String(o.rule_id ?? r)}</code>
                      {o.message ? ': ' + String(o.message) : ''}
                    </li>
                  );
                })
              : (step.rules ?? []).map((r, i) => (
                  <li key={i}>
                    <code>{r}</code>
                  </li>
                ))}
          </ul>
        </div>
      ) : (
        <p>
          <Status s="pending" /> no verdict yet
        </p>
      )}
      {step.approval_requested || step.approval_decided ? (
        <>
          <h4>Approval</h4>
          {step.approval_requested ? <EventRef e={step.approval_requested} label="Requested" /> : null}
          {step.approval_decided ? (
            <p>
              <Status s={String(data(step.approval_decided).decision ?? 'unknown')} /> by {String(data(step.approval_decided).by ?? step.approval_decided.agent)}
              {data(step.approval_decided).reason ? ` — “${String(data(step.approval_decided).reason)}”` : ''} at seq {step.approval_decided.seq}
            </p>
          ) : (
            <p>
              <Status s="needs_approval" /> waiting for a human
            </p>
          )}
          {data(step.approval_requested).preview ? (
            <JsonBlock value={data(step.approval_requested).preview} label="Preview" />
          ) : null}
        </>
      ) : null}
      <h4>Result</h4>
      {step.result ? (
        <>
          <p>
            <Status s={String(data(step.result).status ?? 'ok')} /> {String(data(step.result).tool ?? '')} at seq {step.result.seq},{' '}
            {fmtMs(Number(data(step.result).duration_ms ?? NaN))}
          </p>
          <JsonBlock value={(data(step.result).output ?? null) as Json} label="Tool output" />
        </>
      ) : (
        <p>No result yet.</p>
      )}
      {step.error ? (
        <>
          <h4>
            <span aria-hidden="true">✖ </span>Error
          </h4>
          <p>
            <code>{String(data(step.error).code ?? '')}</code> from {step.error.agent} at seq {step.error.seq}: {String(data(step.error).message ?? '')}
          </p>
        </>
      ) : null}
      {step.end ? (
        <p>
          Ended: <Status s={String(data(step.end).outcome ?? 'unknown')} /> at seq {step.end.seq} after {fmtMs(Number(data(step.end).duration_ms ?? NaN))}
        </p>
      ) : (
        <p>
          <Status s="running" /> the step has not ended at this seq
        </p>
      )}
    </div>
  );
}

/** spanName is what a step of another framework is called: the model's
 * name for a model call, else the span's name, else its intent. */
function spanName(d: Obj): string {
  const m = d.model;
  const model = typeof m === 'string' ? m : m && typeof m === 'object' && !Array.isArray(m) ? String((m as Obj).id ?? '') : '';
  const o = d.otel && typeof d.otel === 'object' && !Array.isArray(d.otel) ? (d.otel as Obj) : {};
  const intent = String(d.intent ?? '');
  if (model && ['llm', 'chat', 'LLM', 'text_completion', 'generate_content'].includes(intent)) return model;
  return String(o.name ?? '') || intent || model || 'step';
}

/** SpanDetail shows a step that is not a governed one (no number, no
 * verdict): what started it, what happened inside it, how it ended. */
function SpanDetail({ step }: { step: StepView }) {
  const pd = data(step.proposal);
  const ed = data(step.end);
  const m = pd.model;
  const model = typeof m === 'string' ? m : m && typeof m === 'object' && !Array.isArray(m) ? String((m as Obj).id ?? '') : '';
  const tok = ed.tokens && typeof ed.tokens === 'object' && !Array.isArray(ed.tokens) ? (ed.tokens as Obj) : null;
  return (
    <div class="step" id="state-step">
      <h3 id="state-step-title">
        {spanName(pd)} by {step.agent}
      </h3>
      <dl class="kv">
        <dt>Kind</dt>
        <dd>{visible(String(pd.intent ?? '')) || '—'}</dd>
        {model ? (
          <>
            <dt>Model</dt>
            <dd>{model}</dd>
          </>
        ) : null}
        {pd.input_summary ? (
          <>
            <dt>Input</dt>
            <dd>{String(pd.input_summary)}</dd>
          </>
        ) : null}
        {ed.output_summary ? (
          <>
            <dt>Output</dt>
            <dd>{String(ed.output_summary)}</dd>
          </>
        ) : null}
        {tok ? (
          <>
            <dt>Tokens</dt>
            <dd>
              in {fmtInt(Number(tok.input ?? 0))} / out {fmtInt(Number(tok.output ?? 0))}
            </dd>
          </>
        ) : null}
      </dl>
      {step.result ? (
        <p>
          Tool <code>{String(data(step.result).tool ?? '')}</code>: <Status s={String(data(step.result).status ?? 'ok')} /> at seq {step.result.seq}
        </p>
      ) : null}
      {step.error ? (
        <p>
          <span aria-hidden="true">✖ </span>
          <code>{String(data(step.error).code ?? '')}</code> at seq {step.error.seq}: {String(data(step.error).message ?? '')}
        </p>
      ) : null}
      {step.end ? (
        <p>
          Ended: <Status s={String(ed.outcome ?? 'unknown')} /> at seq {step.end.seq} after {fmtMs(Number(ed.duration_ms ?? NaN))}
        </p>
      ) : (
        <p>
          <Status s="running" /> not ended at this seq
        </p>
      )}
      <JsonBlock value={pd as Json} label="Start event data" />
    </div>
  );
}

/** costText says what the tokens up to the seq cost, and what it could not
 * price. */
function costText(at: StateAt | null, tokens: number): string {
  if (!at) return '—';
  const unpriced = at.unpriced_models ?? [];
  const missing = unpriced.length ? `no price for ${unpriced.join(', ')}` : '';
  if (at.cost != null) return fmtCost(at.cost) + (missing ? ` (${missing})` : '');
  if (missing) return `unknown: ${missing}`;
  return tokens > 0 ? 'unknown: no price table (lctl debug --prices FILE)' : '—';
}

export function StatePanel({ chainId, seq }: { chainId: string; seq: number }) {
  const [at, setAt] = useState<StateAt | null>(null);
  const [err, setErr] = useState<unknown>(null);
  const [busy, setBusy] = useState(true);

  useEffect(() => {
    const ctl = new AbortController();
    setBusy(true);
    const t = setTimeout(() => {
      get<StateAt>(`chains/${encodeURIComponent(chainId)}/state`, { seq, tail: shown }, ctl.signal).then(
        (r) => {
          setErr(null);
          setAt(r);
          setBusy(false);
        },
        (e) => {
          if ((e as Error).name === 'AbortError') return;
          setErr(e);
          setBusy(false);
        },
      );
    }, 120);
    return () => {
      clearTimeout(t);
      ctl.abort();
    };
  }, [chainId, seq]);

  const ev = at?.event ?? null;
  const st = at?.state;
  const step = at?.step ?? null;
  const facts = st ? Object.entries(st.facts ?? {}) : [];
  const store = at?.fact_store ?? null;
  const nFacts = at?.counts?.facts ?? facts.length;
  const tools = st?.tool_calls ?? [];
  const errors = st?.errors ?? [];
  const nTools = at?.counts?.tool_calls ?? tools.length;
  const nErrors = at?.counts?.errors ?? errors.length;
  const unknown = ev ? !knownTypes.has(ev.type) : false;

  return (
    <section class={'panel state' + (busy ? ' busy' : '')} aria-labelledby="state-h" aria-busy={busy}>
      <h2 id="state-h">
        State at seq <span id="state-seq">{at ? at.seq : seq}</span>
        {busy ? <span class="sr-live"> (loading seq {seq}…)</span> : null}
      </h2>
      {err ? <ErrorBox err={err} what={`the state at seq ${seq}`} /> : null}
      {ev ? (
        <div class="event-head">
          <dl class="kv">
            <dt>Event</dt>
            <dd>
              <code id="state-type">{ev.type}</code> by <strong>{ev.agent}</strong>
            </dd>
            <dt>Time</dt>
            <dd>{fmtTime(ev.timestamp)}</dd>
          </dl>
          {unknown ? (
            <p class="note" role="note">
              <span aria-hidden="true">ℹ </span>Unknown event type “{ev.type}”: shown as raw data.
            </p>
          ) : null}
          <details open={unknown} class="raw">
            <summary>Raw event JSON</summary>
            <JsonBlock value={ev as unknown as Json} label="Raw event JSON" />
          </details>
        </div>
      ) : null}
      {st ? (
        <>
          <h3>Totals so far</h3>
          <dl class="kv totals">
            <dt>Events</dt>
            <dd>{fmtInt(st.event_count)}</dd>
            <dt>Tokens</dt>
            <dd id="state-tokens">
              {fmtInt(st.tokens.input + st.tokens.output)} (in {fmtInt(st.tokens.input)} / out {fmtInt(st.tokens.output)})
            </dd>
            <dt>Cost</dt>
            <dd id="state-cost">{costText(at, st.tokens.input + st.tokens.output)}</dd>
            <dt>Step time</dt>
            <dd>{fmtMs(st.duration_ms)}</dd>
            <dt>Tool calls</dt>
            <dd>{fmtInt(nTools)}</dd>
            <dt>Errors</dt>
            <dd>{fmtInt(nErrors)}</dd>
            {st.run ? (
              <>
                <dt>Run</dt>
                <dd>
                  <Status s={st.run.status} /> {st.run.goal}
                </dd>
              </>
            ) : null}
          </dl>
        </>
      ) : null}
      {step ? <StepDetail step={step} /> : null}
      {st ? (
        <>
          <h3>Facts ({fmtInt(nFacts)})</h3>
          {facts.length === 0 ? (
            <p>No facts yet.</p>
          ) : store ? (
            <FactStore facts={store} seq={at?.seq ?? seq} />
          ) : (
            <table class="facts">
              <thead>
                <tr>
                  <th scope="col">Fact</th>
                  <th scope="col">Text</th>
                  <th scope="col">Confidence</th>
                  <th scope="col">Band</th>
                </tr>
              </thead>
              <tbody>
                {facts.slice(0, 200).map(([id, f]) => (
                  <tr key={id}>
                    <th scope="row">{id}</th>
                    <td>{f.text}</td>
                    <td class="num">{fmtConf(f.confidence)}</td>
                    <td>{band(f.confidence)}</td>
                  </tr>
                ))}
              </tbody>
            </table>
          )}
          {nFacts > 200 ? <p>First 200 of {fmtInt(nFacts)} facts.</p> : null}
          <h3>Tool calls so far ({fmtInt(nTools)})</h3>
          {tools.length === 0 ? (
            <p>None yet.</p>
          ) : (
            <table class="tools">
              <caption class="sr-only">The latest tool calls</caption>
              <thead>
                <tr>
                  <th scope="col">Seq</th>
                  <th scope="col">Tool</th>
                  <th scope="col">Step</th>
                  <th scope="col">Status</th>
                  <th scope="col">Time</th>
                </tr>
              </thead>
              <tbody>
                {tools
                  .slice(-shown)
                  .reverse()
                  .map((t) => (
                    <tr key={t.seq}>
                      <td class="num">{t.seq}</td>
                      <td>{t.tool}</td>
                      <td class="num">{t.step ?? '—'}</td>
                      <td>
                        <Status s={t.status} />
                      </td>
                      <td class="num">{fmtMs(t.duration_ms)}</td>
                    </tr>
                  ))}
              </tbody>
            </table>
          )}
          {nTools > tools.length ? <p>Latest {tools.length} of {fmtInt(nTools)}, newest first.</p> : null}
          {nErrors > 0 ? (
            <>
              <h3>Errors so far ({fmtInt(nErrors)})</h3>
              <ul class="errors">
                {errors
                  .slice(-10)
                  .reverse()
                  .map((e) => (
                    <li key={e.seq}>
                      <span aria-hidden="true">✖ </span>seq {e.seq} <code>{e.code}</code> {e.agent}: {e.message}
                    </li>
                  ))}
              </ul>
            </>
          ) : null}
        </>
      ) : null}
    </section>
  );
}

/** FactStore is the crew's fact store at the selected seq: each fact's
 * confidence then (decay at each hop included), its band, who assessed it
 * and the consensus recorded so far. */
function FactStore({ facts, seq }: { facts: FactAt[]; seq: number }) {
  return (
    <div class="table-wrap">
      <table class="facts fact-store">
        <caption class="sr-only">The fact store at seq {seq}</caption>
        <thead>
          <tr>
            <th scope="col">Fact</th>
            <th scope="col">Text</th>
            <th scope="col">Confidence</th>
            <th scope="col">Band</th>
          </tr>
        </thead>
        {facts.map((f) => (
          <tbody key={f.id} data-fact={f.id}>
            <tr>
              <th scope="row" rowSpan={2}>
                {f.id}
              </th>
              <td>{f.text}</td>
              <td class="num fact-conf" title={f.seq ? `${f.kind} at seq ${f.seq}` : undefined}>
                {fmtConf(f.confidence)}
                {f.kind === 'hop' ? <span class="muted"> (decayed)</span> : null}
              </td>
              <td class={'band band-' + f.band}>
                {f.band}
                {f.blocked ? ' (blocked)' : ''}
              </td>
            </tr>
            <tr class="fact-more">
              <td colSpan={3}>
                Assessed by{' '}
                <span class="fact-assessed">{(f.assessments ?? []).map((a) => `${a.agent} ${fmtConf(a.confidence)}`).join(', ') || '—'}</span>
                {'; consensus '}
                <span class="fact-consensus">
                  {f.consensus
                    ? `score ${fmtConf(f.consensus.consensus_score)}, agreement ${fmtConf(f.consensus.agreement)}` +
                      ` (${(f.consensus.assessors ?? []).join(', ')}; seq ${f.consensus.seq})`
                    : '—'}
                </span>
              </td>
            </tr>
          </tbody>
        ))}
      </table>
    </div>
  );
}
