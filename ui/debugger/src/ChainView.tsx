// One chain: summary first, then the flowchart and the time-travel scrubber
// with the state at the selected seq, the events, confidence and cost. A
// live chain follows the server's event stream.
import { useCallback, useEffect, useRef, useState } from 'preact/hooks';
import type { ChainDetail, LctlEvent } from './api';
import { ApiError, get, sessionKey, token } from './api';
import { ErrorBox, Loading, Status } from './common';
import { EventList } from './EventList';
import { FlowChart } from './Flow';
import { fmtCost, fmtInt, fmtMs } from './fmt';
import { ConfidenceView, PerfView } from './Insights';
import { CancelRun } from './CancelRun';
import { parseRoute, replaceSeq } from './route';
import { StatePanel } from './StatePanel';

type LiveState = 'off' | 'connecting' | 'open' | 'lost' | 'gone';

function clamp(v: number, lo: number, hi: number) {
  return Math.min(hi, Math.max(lo, v));
}

function isTyping(t: EventTarget | null): boolean {
  const el = t as HTMLElement | null;
  if (!el || !el.tagName) return false;
  const tag = el.tagName.toLowerCase();
  return tag === 'input' || tag === 'textarea' || tag === 'select' || el.isContentEditable;
}

export function ChainView({ id, seq: wanted, canCancel }: { id: string; seq?: number; canCancel?: boolean }) {
  const [detail, setDetail] = useState<ChainDetail | null>(null);
  const [err, setErr] = useState<unknown>(null);
  const [seq, setSeqRaw] = useState<number>(wanted ?? 0);
  const [live, setLive] = useState<LiveState>('off');
  const [version, setVersion] = useState(0);
  const follow = useRef(wanted == null);
  const lastSeq = useRef(0);

  // Summary first.
  useEffect(() => {
    const ctl = new AbortController();
    setDetail(null);
    setErr(null);
    get<ChainDetail>(`chains/${encodeURIComponent(id)}`, {}, ctl.signal).then(
      (d) => {
        setDetail(d);
        lastSeq.current = d.last_seq;
        setSeqRaw((s) => (s >= d.first_seq && s <= d.last_seq ? s : wanted ? clamp(wanted, d.first_seq, d.last_seq) : d.live ? d.last_seq : d.first_seq));
      },
      (e) => {
        if ((e as Error).name !== 'AbortError') setErr(e);
      },
    );
    return () => ctl.abort();
  }, [id]);

  const setSeq = useCallback(
    (s: number) => {
      if (!detail) return;
      const v = clamp(Math.round(s), detail.first_seq, lastSeq.current || detail.last_seq);
      follow.current = v === lastSeq.current;
      setSeqRaw(v);
    },
    [detail],
  );

  // The seq the URL names as this view last knew it: the route's, then
  // each one the view wrote.
  const named = useRef(wanted);

  // A link (or the back button) naming another seq of this chain selects it.
  useEffect(() => {
    named.current = wanted;
    if (wanted != null && detail) setSeq(wanted);
  }, [wanted]);

  // The URL names the selected seq, so a link shows the same point. Not
  // when the URL changed since (a link followed whose hashchange has not
  // reached the view yet): writing over it would lose where the user went.
  useEffect(() => {
    if (!detail || !seq) return;
    const t = setTimeout(() => {
      const r = parseRoute(location.hash);
      if (r.name !== 'chain' || r.id !== id || r.seq !== named.current) return;
      replaceSeq(id, seq);
      named.current = seq;
    }, 300);
    return () => clearTimeout(t);
  }, [id, seq, detail]);

  // Keyboard: left/right step through events anywhere on the page, except
  // while typing in a field (the slider handles its own arrows).
  useEffect(() => {
    const on = (ev: KeyboardEvent) => {
      if (isTyping(ev.target) || ev.altKey || ev.ctrlKey || ev.metaKey) return;
      if (ev.key === 'ArrowLeft' || ev.key === 'ArrowRight') {
        ev.preventDefault();
        setSeqRaw((s) => {
          if (!detail) return s;
          const v = clamp(s + (ev.key === 'ArrowLeft' ? -1 : 1), detail.first_seq, lastSeq.current);
          follow.current = v === lastSeq.current;
          return v;
        });
      }
    };
    addEventListener('keydown', on);
    return () => removeEventListener('keydown', on);
  }, [detail]);

  // Live mode: server-sent events from the last seq on. EventSource
  // reconnects by itself (sending Last-Event-ID); when the server refuses
  // the stream, we reconnect from the last seq we have.
  useEffect(() => {
    if (!detail?.live) return;
    let es: EventSource | null = null;
    let retry: ReturnType<typeof setTimeout> | undefined;
    let bump: ReturnType<typeof setTimeout> | undefined;
    let delay = 1000;
    let stopped = false;
    const scheduleBump = () => {
      if (bump) return;
      bump = setTimeout(() => {
        bump = undefined;
        setVersion((v) => v + 1);
      }, 500);
    };
    const connect = () => {
      if (stopped) return;
      setLive('connecting');
      // EventSource cannot send headers: the token and the session's
      // key, when there are, go in the query (the server accepts them on
      // /live only).
      const q = new URLSearchParams({ from: String(lastSeq.current) });
      if (token()) q.set('access_token', token());
      if (sessionKey()) q.set('session_key', sessionKey());
      es = new EventSource(`api/chains/${encodeURIComponent(id)}/live?${q}`);
      es.addEventListener('open', () => {
        delay = 1000;
        setLive('open');
      });
      es.addEventListener('lctl', (m) => {
        let e: LctlEvent;
        try {
          e = JSON.parse((m as MessageEvent).data);
        } catch {
          return;
        }
        if (typeof e.seq !== 'number' || e.seq <= lastSeq.current) return;
        const wasFollowing = follow.current;
        lastSeq.current = e.seq;
        setDetail((d) => (d ? { ...d, last_seq: e.seq, events: d.events + 1 } : d));
        if (wasFollowing) setSeqRaw(e.seq);
        scheduleBump();
      });
      es.addEventListener('gone', () => {
        stopped = true;
        es?.close();
        setLive('gone');
      });
      es.addEventListener('error', () => {
        if (stopped) return;
        setLive('lost');
        // EventSource retries by itself after a dropped connection; after
        // a refused one (an error status) it gives up, so we retry, unless
        // the chain is gone.
        if (es && es.readyState === EventSource.CLOSED) {
          retry = setTimeout(() => {
            get<ChainDetail>(`chains/${encodeURIComponent(id)}`).then(
              () => connect(),
              (e) => {
                if (e instanceof ApiError && e.status === 404) {
                  stopped = true;
                  setLive('gone');
                } else {
                  retry = setTimeout(connect, delay);
                }
              },
            );
          }, delay);
          delay = Math.min(delay * 2, 15000);
        }
      });
    };
    connect();
    return () => {
      stopped = true;
      es?.close();
      clearTimeout(retry);
      clearTimeout(bump);
    };
  }, [id, detail?.live]);

  // Refresh the summary (stats, bottlenecks) now and then while live.
  useEffect(() => {
    if (!version) return;
    const ctl = new AbortController();
    const t = setTimeout(() => {
      get<ChainDetail>(`chains/${encodeURIComponent(id)}`, {}, ctl.signal).then(
        (d) => {
          // Events the stream has not brought (stored while it was
          // reconnecting): the lists fetch again, the selection follows.
          const grew = d.last_seq > lastSeq.current;
          if (grew) {
            lastSeq.current = d.last_seq;
            if (follow.current) setSeqRaw(d.last_seq);
            setVersion((v) => v + 1);
          }
          setDetail((old) => ({ ...d, last_seq: Math.max(d.last_seq, old?.last_seq ?? 0), live: d.live }));
        },
        () => {},
      );
    }, 2000);
    return () => {
      clearTimeout(t);
      ctl.abort();
    };
  }, [version]);

  if (err) {
    return (
      <main id="main" tabIndex={-1}>
        <h1>Chain {id}</h1>
        <ErrorBox err={err} what="the chain" />
        <p>
          <a href="#/">Back to the chains</a>
        </p>
      </main>
    );
  }
  if (!detail) {
    return (
      <main id="main" tabIndex={-1}>
        <h1>Chain {id}</h1>
        <Loading what="the chain" />
      </main>
    );
  }
  const st = detail.stats;
  return (
    <main id="main" tabIndex={-1} class="chain-view">
      <header class="chain-head">
        <h1>
          Chain <span id="chain-id">{detail.id}</span>
        </h1>
        <dl class="kv summary">
          <dt>Status</dt>
          <dd id="chain-status">
            {detail.status === 'unknown' ? <span title="the chain records no run status">—</span> : <Status s={detail.status} />}
          </dd>
          <dt>Events</dt>
          <dd id="chain-events">{fmtInt(detail.events)}</dd>
          <dt>Duration</dt>
          <dd>{fmtMs(detail.duration_ms ?? st?.duration_ms)}</dd>
          <dt>Agents</dt>
          <dd>{(detail.agents ?? st?.agents ?? []).join(', ') || '—'}</dd>
          {st ? (
            <>
              <dt>Tokens</dt>
              <dd>
                {fmtInt(st.tokens.input + st.tokens.output)} (in {fmtInt(st.tokens.input)} / out {fmtInt(st.tokens.output)})
              </dd>
              <dt>Cost</dt>
              <dd>{fmtCost(st.cost)}</dd>
              <dt>Errors</dt>
              <dd>{fmtInt(st.errors)}</dd>
            </>
          ) : null}
          <dt>Integrity</dt>
          <dd>
            {detail.verify ? (
              detail.verify.ok ? (
                <span class="status st-ok">
                  <span aria-hidden="true">✓</span> hash chain verified
                </span>
              ) : (
                <span class="status st-error">
                  <span aria-hidden="true">✖</span> broken at seq {detail.verify.first_bad_seq}: {detail.verify.message}
                </span>
              )
            ) : (
              'not checked'
            )}
          </dd>
        </dl>
        {canCancel && detail.live ? <CancelRun id={detail.id} status={detail.status ?? ""} /> : null}
        {detail.live ? (
          <p class={'live live-' + live} role="status" id="live-status">
            {live === 'open' ? (
              <>
                <span aria-hidden="true">● </span>Live: new events appear as they arrive.
              </>
            ) : live === 'lost' ? (
              <>
                <span aria-hidden="true">⚠ </span>Connection lost, reconnecting…
              </>
            ) : live === 'gone' ? (
              <>
                <span aria-hidden="true">✖ </span>This chain no longer exists on the server.
              </>
            ) : (
              'Connecting to the live stream…'
            )}
          </p>
        ) : null}
      </header>

      <section class="scrubber panel" aria-labelledby="scrub-h">
        <h2 id="scrub-h" class="sr-only">
          Time travel
        </h2>
        <button type="button" onClick={() => setSeq(detail.first_seq)} aria-label="First event">
          ⇤
        </button>
        <button type="button" onClick={() => setSeq(seq - 1)} aria-label="Previous event">
          ◀
        </button>
        <label class="slider">
          <span class="sr-only">Selected event</span>
          <input
            id="scrubber"
            type="range"
            min={detail.first_seq}
            max={detail.last_seq}
            step={1}
            value={seq}
            aria-valuetext={`seq ${seq} of ${detail.last_seq}`}
            onInput={(ev) => setSeq(Number((ev.target as HTMLInputElement).value))}
          />
        </label>
        <button type="button" onClick={() => setSeq(seq + 1)} aria-label="Next event">
          ▶
        </button>
        <button type="button" onClick={() => setSeq(detail.last_seq)} aria-label="Last event">
          ⇥
        </button>
        <label class="seqbox">
          seq{' '}
          <input
            type="number"
            min={detail.first_seq}
            max={detail.last_seq}
            value={seq}
            onChange={(ev) => setSeq(Number((ev.target as HTMLInputElement).value))}
          />{' '}
          of <span id="last-seq">{detail.last_seq}</span>
        </label>
        <span class="hint">← → step through events</span>
      </section>

      <div class="split">
        <section class="panel flow-panel" aria-labelledby="flow-h">
          <h2 id="flow-h">Flow</h2>
          <FlowChart chainId={id} seq={seq} firstSeq={detail.first_seq} lastSeq={detail.last_seq} onSelect={setSeq} version={version} />
        </section>
        <StatePanel chainId={id} seq={seq} />
      </div>

      <section class="panel" aria-labelledby="events-h">
        <h2 id="events-h">Events</h2>
        <EventList chainId={id} count={detail.events} seq={seq} onSelect={setSeq} version={version} />
      </section>

      <section class="panel" aria-labelledby="perf-h" id="perf">
        <h2 id="perf-h">Cost and duration</h2>
        <PerfView detail={detail} onSelect={setSeq} />
      </section>

      <section class="panel" aria-labelledby="conf-h" id="confidence">
        <h2 id="conf-h">Confidence per fact</h2>
        <ConfidenceView chainId={id} version={version} onSelect={setSeq} />
      </section>
    </main>
  );
}
