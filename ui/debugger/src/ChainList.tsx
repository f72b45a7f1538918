// The chain list: search by id, agent, status and time; pick two to compare.
import { useEffect, useState } from 'preact/hooks';
import type { ChainList, ChainSummary } from './api';
import { get } from './api';
import { ErrorBox, Loading, Status } from './common';
import { fmtCost, fmtInt, fmtMs, fmtTime } from './fmt';
import { chainHref, diffHref } from './route';

const statuses = ['', 'running', 'completed', 'failed', 'cancelled', 'denied', 'unknown'];

interface Filter {
  q: string;
  agent: string;
  status: string;
  since: string;
  until: string;
}

function toRFC3339(local: string): string | undefined {
  if (!local) return undefined;
  const d = new Date(local);
  return Number.isNaN(d.getTime()) ? undefined : d.toISOString();
}

export function ChainListView({ initial }: { initial: URLSearchParams }) {
  const [form, setForm] = useState<Filter>({
    q: initial.get('q') ?? '',
    agent: initial.get('agent') ?? '',
    status: initial.get('status') ?? '',
    since: initial.get('since') ?? '',
    until: initial.get('until') ?? '',
  });
  const [filter, setFilter] = useState<Filter>(form);
  const [chains, setChains] = useState<ChainSummary[] | null>(null);
  const [cursor, setCursor] = useState<string | undefined>();
  const [err, setErr] = useState<unknown>(null);
  const [picked, setPicked] = useState<string[]>([]);
  const [more, setMore] = useState(false);

  const load = (f: Filter, after?: string) => {
    const ctl = new AbortController();
    get<ChainList>(
      'chains',
      {
        q: f.q,
        agent: f.agent,
        status: f.status,
        since: toRFC3339(f.since),
        until: toRFC3339(f.until),
        limit: 100,
        cursor: after,
      },
      ctl.signal,
    ).then(
      (r) => {
        setErr(null);
        setChains((prev) => (after && prev ? prev.concat(r.chains ?? []) : (r.chains ?? [])));
        setCursor(r.next_cursor || undefined);
        setMore(false);
      },
      (e) => {
        if ((e as Error).name !== 'AbortError') setErr(e);
        setMore(false);
      },
    );
    return ctl;
  };

  useEffect(() => {
    const ctl = load(filter);
    return () => ctl.abort();
  }, [filter]);

  const submit = (ev: Event) => {
    ev.preventDefault();
    setChains(null);
    setFilter({ ...form });
  };
  const toggle = (id: string) =>
    setPicked((p) => (p.includes(id) ? p.filter((x) => x !== id) : p.concat(id).slice(-2)));
  const field = (k: keyof Filter) => (ev: Event) => setForm({ ...form, [k]: (ev.target as HTMLInputElement).value });

  return (
    <main id="main" tabIndex={-1} class="list-view">
      <h1>Chains</h1>
      <form class="search" role="search" aria-label="Search chains" onSubmit={submit}>
        <label>
          Chain id <input type="search" name="q" value={form.q} onInput={field('q')} placeholder="run-2026…" />
        </label>
        <label>
          Agent <input type="text" name="agent" value={form.agent} onInput={field('agent')} />
        </label>
        <label>
          Status{' '}
          <select name="status" value={form.status} onChange={field('status')}>
            {statuses.map((s) => (
              <option value={s}>{s || 'any'}</option>
            ))}
          </select>
        </label>
        <label>
          Since <input type="datetime-local" name="since" value={form.since} onInput={field('since')} />
        </label>
        <label>
          Until <input type="datetime-local" name="until" value={form.until} onInput={field('until')} />
        </label>
        <button type="submit">Search</button>
      </form>
      <div class="compare-bar">
        <span>
          {picked.length === 2
            ? `Compare ${picked[0]} with ${picked[1]}`
            : `Pick two chains to compare (${picked.length} picked)`}
        </span>
        {picked.length === 2 ? (
          <a class="button" href={diffHref(picked[0], picked[1])} id="compare">
            Compare
          </a>
        ) : (
          <button type="button" disabled>
            Compare
          </button>
        )}
      </div>
      {err ? <ErrorBox err={err} what="the chains" /> : null}
      {chains === null && !err ? <Loading what="chains" /> : null}
      {chains && chains.length === 0 ? <p class="empty">No chain matches.</p> : null}
      {chains && chains.length > 0 ? (
        <div class="table-wrap">
          <table class="chains">
            <caption class="sr-only">Chains, newest first</caption>
            <thead>
              <tr>
                <th scope="col">Compare</th>
                <th scope="col">Chain</th>
                <th scope="col">Status</th>
                <th scope="col">Events</th>
                <th scope="col">Agents</th>
                <th scope="col">Duration</th>
                <th scope="col">Errors</th>
                <th scope="col">Tokens</th>
                <th scope="col">Cost</th>
                <th scope="col">Waiting</th>
                <th scope="col">Last event</th>
              </tr>
            </thead>
            <tbody>
              {chains.map((c) => (
                <tr key={c.id}>
                  <td>
                    <input
                      type="checkbox"
                      checked={picked.includes(c.id)}
                      onChange={() => toggle(c.id)}
                      aria-label={`Pick ${c.id} to compare`}
                    />
                  </td>
                  <th scope="row">
                    <a href={chainHref(c.id)}>{c.id}</a>
                  </th>
                  <td>
                    {c.status === 'unknown' ? '—' : <Status s={c.status} />}
                  </td>
                  <td class="num">{fmtInt(c.events)}</td>
                  <td>{(c.agents ?? []).join(', ')}</td>
                  <td class="num">{fmtMs(c.duration_ms)}</td>
                  <td class="num">{fmtInt(c.errors ?? 0)}</td>
                  <td class="num">{c.tokens ? fmtInt(c.tokens.input + c.tokens.output) : '—'}</td>
                  <td class="num">{fmtCost(c.cost)}</td>
                  <td>{c.pending_approvals ? <Status s="needs_approval" /> : '—'}</td>
                  <td>{fmtTime(c.last_timestamp)}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      ) : null}
      {cursor ? (
        <button
          type="button"
          disabled={more}
          onClick={() => {
            setMore(true);
            load(filter, cursor);
          }}
        >
          {more ? 'Loading…' : 'More chains'}
        </button>
      ) : null}
    </main>
  );
}
