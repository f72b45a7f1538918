// Pending approvals: the proposal, why it needs a human, and the preview of
// what it would change; approve or deny goes to the validator through the
// server with the user's own bearer token.
import { useEffect, useState } from 'preact/hooks';
import type { Approval, Json, Obj } from './api';
import { ApiError, approverName, decide, get, pick, sessionKey, setApproverName, setToken, token } from './api';
import { ErrorBox, JsonBlock, Loading, Status } from './common';
import { fmtTime, visible } from './fmt';
import { chainHref } from './route';

function str(v: Json | undefined): string {
  return v == null ? '' : typeof v === 'string' ? v : JSON.stringify(v);
}

function stateOf(a: Approval): string {
  const s = str(pick(a, 'state')).replace(/^APPROVAL_STATE_/, '').toLowerCase();
  return s === 'pending' ? 'pending' : s || 'pending';
}

/** Preview shows a tool's dry run; a unified diff gets +/- marks per line. */
function Preview({ p }: { p: Obj }) {
  const kind = str(pick(p, 'kind'));
  const content = str(pick(p, 'content'));
  if (kind !== 'diff') return <pre class="json preview">{content}</pre>;
  return (
    <pre class="preview diff-text" tabIndex={0} aria-label="Preview: unified diff">
      {content.split('\n').map((line, i) => {
        const c = line.startsWith('+') && !line.startsWith('+++') ? 'add' : line.startsWith('-') && !line.startsWith('---') ? 'del' : line.startsWith('@@') ? 'hunk' : '';
        return (
          <span key={i} class={'dl ' + c}>
            {line + '\n'}
          </span>
        );
      })}
    </pre>
  );
}

function TokenForm({ onDone, why }: { onDone: () => void; why: string }) {
  const [t, setT] = useState('');
  return (
    <form
      class="token-form"
      aria-label="Bearer token"
      onSubmit={(ev) => {
        ev.preventDefault();
        setToken(t.trim());
        onDone();
      }}
    >
      <p>{why}</p>
      <label>
        Bearer token <input id="token" type="password" autocomplete="off" value={t} onInput={(ev) => setT((ev.target as HTMLInputElement).value)} />
      </label>
      <button type="submit">Use this token</button>
      <p class="hint">Kept in this tab only (sessionStorage), sent as an Authorization header.</p>
    </form>
  );
}

function Card({ a, auth, onDecided }: { a: Approval; auth: boolean; onDecided: (text: string) => void }) {
  const runId = str(pick(a, 'runId', 'run_id'));
  const step = Number(pick(a, 'step') ?? 0);
  // The decision names the step id of the approval shown, not its number:
  // another approval of the same number (an undo asked again after a
  // withdrawal) is not decided by a click on this one.
  const stepId = str(pick(a, 'stepId', 'step_id'));
  const proposal = (pick(a, 'proposal') ?? {}) as Obj;
  const reasons = (pick(a, 'reasons') ?? []) as Obj[];
  const preview = pick(a, 'preview') as Obj | undefined;
  // A crew run's step: the member that proposed it and the hand-overs that
  // gave it control, the entry agent first (empty outside a crew run).
  const member = str(pick(a, 'agent'));
  const crew = str(pick(a, 'crew'));
  const path = pick(a, 'handoffPath', 'handoff_path');
  const handoffs = (Array.isArray(path) ? path : []).map((n) => visible(str(n)));
  const state = stateOf(a);
  const [reason, setReason] = useState('');
  const [approver, setApprover] = useState(approverName());
  const [busy, setBusy] = useState(false);
  const [msg, setMsg] = useState<{ ok: boolean; text: string } | null>(null);
  const [ask, setAsk] = useState<null | { approve: boolean; why: string }>(null);

  const send = async (approve: boolean) => {
    // Signed in by a one-time link, the page decides as that session's
    // principal (its key names it); else it needs the user's token.
    if (auth && !token() && !sessionKey()) {
      setAsk({ approve, why: 'Deciding needs your identity: paste your bearer token once for this tab.' });
      return;
    }
    if (!auth && !approver.trim()) {
      setMsg({ ok: false, text: 'Name the approver: the validator records who decided.' });
      return;
    }
    if (!approve && !reason.trim()) {
      setMsg({ ok: false, text: 'Give a reason to deny: the agent is told why.' });
      return;
    }
    setBusy(true);
    setMsg(null);
    try {
      const r = await decide(runId, stepId, approve, reason, auth ? '' : approver.trim());
      const s = stateOf(r.approval ?? {});
      onDecided(`Run ${runId} step ${step}: ${s} (${approve ? 'approved' : 'denied'} by you).`);
    } catch (e) {
      const err = e as ApiError;
      if (err.code === 'UNAUTHENTICATED') {
        setToken('');
        setAsk({ approve, why: 'The server did not accept the token: paste a valid one.' });
      }
      setMsg({ ok: false, text: `${err.code ?? 'ERROR'}: ${err.message}` });
    } finally {
      setBusy(false);
    }
  };

  const title = `Run ${runId}, step ${step}: ${str(pick(proposal, 'tool'))}`;
  return (
    <article class="approval panel" aria-label={title} data-run={runId} data-step={step}>
      <h2>
        <a href={chainHref(runId)}>{runId}</a> step {step}: <code>{str(pick(proposal, 'tool'))}</code> <Status s={state === 'pending' ? 'needs_approval' : state} />
      </h2>
      <dl class="kv">
        <dt>Goal</dt>
        <dd>{visible(str(pick(proposal, 'goal'))) || '—'}</dd>
        <dt>Requested by</dt>
        <dd>{str(pick(a, 'requestedBy', 'requested_by')) || '—'}</dd>
        {member ? (
          <>
            <dt>Crew member</dt>
            <dd class="crew-member">
              {visible(member)} (crew {visible(crew) || '—'})
            </dd>
            <dt>Handed over</dt>
            <dd class="handoff-path">{handoffs.length > 1 ? handoffs.join(' → ') : `none (${handoffs[0] ?? visible(member)} holds control from the start)`}</dd>
          </>
        ) : null}
        <dt>Requested</dt>
        <dd>{fmtTime(str(pick(a, 'requestedAt', 'requested_at')))}</dd>
        <dt>Expires</dt>
        <dd>{fmtTime(str(pick(a, 'expiresAt', 'expires_at')))}</dd>
        <dt>Policy</dt>
        <dd>{str(pick(a, 'policyVersion', 'policy_version')) || '—'}</dd>
      </dl>
      <h3>Why it needs a human</h3>
      <ul class="rules">
        {reasons.map((r, i) => (
          <li key={i}>
            <code>{str(pick(r, 'ruleId', 'rule_id'))}</code>: {str(pick(r, 'message'))}
          </li>
        ))}
      </ul>
      <h3>Arguments</h3>
      <JsonBlock value={pick(proposal, 'arguments') ?? {}} label="Arguments" />
      {preview ? (
        <>
          <h3>Preview</h3>
          <Preview p={preview} />
          {str(pick(preview, 'baseDigest', 'base_digest')) ? (
            <p class="bound">
              Bound to <code>{str(pick(preview, 'baseDigest', 'base_digest'))}</code>: the step acts only on the entry this preview was made from
              {str(pick(preview, 'baseDigest', 'base_digest')).startsWith('[REDACTED') ? ' (its digest keyed: the preview was redacted)' : ''}.
            </p>
          ) : null}
        </>
      ) : null}
      {state === 'pending' ? (
        <div class="decide">
          {!auth ? (
            <label>
              Approver{' '}
              <input
                type="text"
                name="approver"
                value={approver}
                autocomplete="username"
                onInput={(ev) => {
                  const v = (ev.target as HTMLInputElement).value;
                  setApprover(v);
                  setApproverName(v);
                }}
              />
            </label>
          ) : null}
          <label>
            Reason <input type="text" name="reason" value={reason} onInput={(ev) => setReason((ev.target as HTMLInputElement).value)} />
          </label>
          <button type="button" class="approve" disabled={busy} onClick={() => send(true)}>
            ✔ Approve
          </button>
          <button type="button" class="deny" disabled={busy} onClick={() => send(false)}>
            ⊘ Deny
          </button>
        </div>
      ) : null}
      {ask ? (
        <TokenForm
          why={ask.why}
          onDone={() => {
            const again = ask.approve;
            setAsk(null);
            void send(again);
          }}
        />
      ) : null}
      {msg ? (
        <p role={msg.ok ? 'status' : 'alert'} class={msg.ok ? 'decided' : 'errorbox'}>
          <span aria-hidden="true">{msg.ok ? '✓ ' : '✖ '}</span>
          {msg.text}
        </p>
      ) : null}
    </article>
  );
}

export function ApprovalsView({ run, auth }: { run?: string; auth: boolean }) {
  const [list, setList] = useState<Approval[] | null>(null);
  const [err, setErr] = useState<unknown>(null);
  const [tick, setTick] = useState(0);
  const [notes, setNotes] = useState<string[]>([]);
  useEffect(() => {
    const ctl = new AbortController();
    get<{ approvals: Approval[] }>('approvals', { run }, ctl.signal).then(
      (r) => {
        setErr(null);
        setList(r.approvals ?? []);
      },
      (e) => {
        if ((e as Error).name !== 'AbortError') setErr(e);
      },
    );
    const t = setTimeout(() => setTick((x) => x + 1), 5000);
    return () => {
      clearTimeout(t);
      ctl.abort();
    };
  }, [run, tick]);
  return (
    <main id="main" tabIndex={-1} class="approvals-view">
      <h1>Pending approvals{run ? ` for ${run}` : ''}</h1>
      <div role="status" id="decided">
        {notes.map((n, i) => (
          <p key={i} class="decided">
            <span aria-hidden="true">✓ </span>
            {n}
          </p>
        ))}
      </div>
      {err ? <ErrorBox err={err} what="the approvals" /> : null}
      {!list && !err ? <Loading what="approvals" /> : null}
      {list && list.length === 0 ? <p class="empty">Nothing waits for a human.</p> : null}
      {list?.map((a) => (
        <Card key={str(pick(a, 'runId', 'run_id')) + '/' + str(pick(a, 'step'))} a={a} auth={auth} onDecided={(n) => {
            setNotes((xs) => xs.concat(n));
            setTick((x) => x + 1);
          }} />
      ))}
    </main>
  );
}
