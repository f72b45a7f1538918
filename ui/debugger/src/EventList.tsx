// A virtualized list of a chain's events: only the rows in view are in the
// DOM and only the pages in view are fetched, so 100,000 events scroll as
// easily as 20.
import { useEffect, useRef, useState } from 'preact/hooks';
import type { EventPage, LctlEvent } from './api';
import { get } from './api';
import { short } from './fmt';
import { knownTypes } from './StatePanel';

const rowH = 26;
const pageSize = 200;

function summary(e: LctlEvent): string {
  const d = e.data ?? {};
  const parts: string[] = [];
  for (const k of ['step', 'tool', 'decision', 'outcome', 'status', 'code', 'fact_id', 'intent', 'message']) {
    if (d[k] != null && d[k] !== '') parts.push(`${k}=${short(d[k], 60)}`);
  }
  return parts.length ? parts.join(' ') : short(d, 100);
}

interface Props {
  chainId: string;
  /** count is the number of events: one row each, in chain order. */
  count: number;
  seq: number;
  onSelect: (seq: number) => void;
  /** version changes when live events arrive: the last page is fetched again. */
  version: number;
}

/** EventList places rows by position in the chain, not by seq: a chain
 * with gaps in its seqs (or out of order) still has one row per event, and
 * the selected seq is found by its position (from the pages loaded, else
 * asked of the server). */
export function EventList({ chainId, count, seq, onSelect, version }: Props) {
  const box = useRef<HTMLDivElement>(null);
  const pages = useRef(new Map<number, LctlEvent[] | 'loading'>());
  // rowOf maps the seqs seen so far to their row (position).
  const rowOf = useRef(new Map<number, number>());
  const [, setTick] = useState(0);
  const [top, setTop] = useState(0);
  const [height, setHeight] = useState(360);

  // A new chain, or live events: forget what might be stale.
  useEffect(() => {
    pages.current.clear();
    rowOf.current.clear();
    setTick((t) => t + 1);
  }, [chainId]);
  useEffect(() => {
    const last = Math.floor(Math.max(0, count - 1) / pageSize);
    pages.current.delete(last);
    pages.current.delete(last - 1);
    setTick((t) => t + 1);
  }, [version]);

  const first = Math.max(0, Math.floor(top / rowH) - 5);
  const last = Math.min(count, Math.ceil((top + height) / rowH) + 5);

  useEffect(() => {
    const want = new Set<number>();
    for (let i = first; i < last; i += pageSize) want.add(Math.floor(i / pageSize));
    if (last > 0) want.add(Math.floor((last - 1) / pageSize));
    for (const p of want) {
      if (pages.current.has(p)) continue;
      pages.current.set(p, 'loading');
      get<EventPage>(`chains/${encodeURIComponent(chainId)}/events`, { pos: p * pageSize, limit: pageSize }).then(
        (r) => {
          const evs = r.events ?? [];
          evs.forEach((e, j) => rowOf.current.set(e.seq, p * pageSize + j));
          pages.current.set(p, evs);
          setTick((t) => t + 1);
        },
        () => {
          pages.current.delete(p);
        },
      );
    }
  }, [chainId, first, last, version]);

  // Keep the selected event in view: its row is its position, known from
  // a page already loaded or asked of the server.
  useEffect(() => {
    let cancelled = false;
    const show = (row: number) => {
      const el = box.current;
      if (!el || cancelled) return;
      const y = row * rowH;
      if (y < el.scrollTop || y + rowH > el.scrollTop + el.clientHeight) {
        el.scrollTop = Math.max(0, y - el.clientHeight / 2);
      }
    };
    const row = rowOf.current.get(seq);
    if (row !== undefined) {
      show(row);
    } else {
      get<EventPage>(`chains/${encodeURIComponent(chainId)}/events`, { from: seq, limit: 1 }).then(
        (r) => {
          if (r.events?.[0]?.seq !== seq) return;
          rowOf.current.set(seq, r.position);
          show(r.position);
        },
        () => {},
      );
    }
    return () => {
      cancelled = true;
    };
  }, [seq, chainId]);

  useEffect(() => {
    const el = box.current;
    if (el) setHeight(el.clientHeight || 360);
  }, []);

  const rows = [];
  for (let i = first; i < last; i++) {
    const page = pages.current.get(Math.floor(i / pageSize));
    const e = Array.isArray(page) ? page[i % pageSize] : undefined;
    const s = e?.seq;
    const sel = s !== undefined && s === seq;
    rows.push(
      <button
        type="button"
        key={i}
        class={'ev-row' + (sel ? ' selected' : '') + (e && !knownTypes.has(e.type) ? ' unknown' : '')}
        style={{ top: i * rowH + 'px' }}
        aria-current={sel ? 'true' : undefined}
        tabIndex={sel ? 0 : -1}
        data-seq={s}
        disabled={s === undefined}
        onClick={() => s !== undefined && onSelect(s)}
      >
        <span class="ev-seq">{s}</span>
        {e ? (
          <>
            <span class="ev-type">{knownTypes.has(e.type) ? e.type : '? ' + e.type}</span>
            <span class="ev-agent">{e.agent}</span>
            <span class="ev-sum">{summary(e)}</span>
          </>
        ) : (
          <span class="ev-sum">…</span>
        )}
      </button>,
    );
  }

  return (
    <div
      class="events"
      ref={box}
      role="region"
      aria-label={`Events (${count}), only those in view are drawn`}
      onScroll={(ev) => setTop((ev.target as HTMLDivElement).scrollTop)}
    >
      <div class="ev-spacer" style={{ height: count * rowH + 'px' }}>
        {rows}
      </div>
    </div>
  );
}
