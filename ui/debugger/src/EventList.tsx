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
  firstSeq: number;
  count: number;
  seq: number;
  onSelect: (seq: number) => void;
  /** version changes when live events arrive: the last page is fetched again. */
  version: number;
}

export function EventList({ chainId, firstSeq, count, seq, onSelect, version }: Props) {
  const box = useRef<HTMLDivElement>(null);
  const pages = useRef(new Map<number, LctlEvent[] | 'loading'>());
  const [, setTick] = useState(0);
  const [top, setTop] = useState(0);
  const [height, setHeight] = useState(360);

  // A new chain, or live events: forget what might be stale.
  useEffect(() => {
    pages.current.clear();
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
      get<EventPage>(`chains/${encodeURIComponent(chainId)}/events`, { from: firstSeq + p * pageSize, limit: pageSize }).then(
        (r) => {
          pages.current.set(p, r.events ?? []);
          setTick((t) => t + 1);
        },
        () => {
          pages.current.delete(p);
        },
      );
    }
  }, [chainId, firstSeq, first, last, version]);

  // Keep the selected event in view.
  useEffect(() => {
    const el = box.current;
    if (!el) return;
    const y = (seq - firstSeq) * rowH;
    if (y < el.scrollTop || y + rowH > el.scrollTop + el.clientHeight) {
      el.scrollTop = Math.max(0, y - el.clientHeight / 2);
    }
  }, [seq, firstSeq]);

  useEffect(() => {
    const el = box.current;
    if (el) setHeight(el.clientHeight || 360);
  }, []);

  const rows = [];
  for (let i = first; i < last; i++) {
    const page = pages.current.get(Math.floor(i / pageSize));
    const e = Array.isArray(page) ? page[i % pageSize] : undefined;
    const s = e ? e.seq : firstSeq + i;
    const sel = s === seq;
    rows.push(
      <button
        type="button"
        key={i}
        class={'ev-row' + (sel ? ' selected' : '') + (e && !knownTypes.has(e.type) ? ' unknown' : '')}
        style={{ top: i * rowH + 'px' }}
        aria-current={sel ? 'true' : undefined}
        tabIndex={sel ? 0 : -1}
        data-seq={s}
        onClick={() => onSelect(s)}
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
