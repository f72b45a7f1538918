// The flowchart of a chain: agents' steps as nodes in order, tool calls and
// errors attached, handoffs between agents as edges. Laid out with dagre and
// drawn as SVG. Long chains are shown a window of events at a time.
import { useEffect, useMemo, useRef, useState } from 'preact/hooks';
import dagre from '@dagrejs/dagre';
import type { Flow, FlowNode } from './api';
import { get } from './api';
import { ErrorBox, statusClass, statusLabel } from './common';

/** pageNodes is how many nodes one flow page holds; a page starts a little
 * before the selected seq so its step is on it. */
const pageNodes = 150;
const lookBack = 120;

const nodeW = 230;
const baseH = 64;
const lineH = 15;
const maxLines = 4;

function attachedLines(n: FlowNode): number {
  const a = n.attached?.length ?? 0;
  return Math.min(a, maxLines) + (a > maxLines || (n.attached_more ?? 0) > 0 ? 1 : 0);
}

function heightOf(n: FlowNode): number {
  return baseH + attachedLines(n) * lineH + (n.gated ? lineH : 0);
}

const attIcon: Record<string, string> = {
  verdict: '⚖',
  tool_call: '⚙',
  error: '✖',
  approval_requested: '⚑',
  approval_decided: '✍',
  fact_added: 'ℹ',
  fact_modified: 'ℹ',
};

const kindIcon: Record<string, string> = {
  agent_step: '◆',
  tool_call: '⚙',
  error: '✖',
  verdict: '⚖',
  approval: '⚑',
  fact: 'ℹ',
  handoff: '⇄',
  event: '•',
};

interface Laid {
  nodes: (FlowNode & { x: number; y: number })[];
  edges: { from: string; to: string; kind: string; points: { x: number; y: number }[] }[];
  width: number;
  height: number;
}

function layout(flow: Flow): Laid {
  const g = new dagre.graphlib.Graph();
  g.setGraph({ rankdir: 'TB', nodesep: 24, ranksep: 30, marginx: 12, marginy: 12 });
  g.setDefaultEdgeLabel(() => ({}));
  const ids = new Set<string>();
  for (const n of flow.nodes) {
    g.setNode(n.id, { width: nodeW, height: heightOf(n) });
    ids.add(n.id);
  }
  const edges = (flow.edges ?? []).filter((e) => ids.has(e.from) && ids.has(e.to) && e.from !== e.to);
  for (const e of edges) g.setEdge(e.from, e.to);
  dagre.layout(g);
  const nodes = flow.nodes.map((n) => {
    const p = g.node(n.id);
    return { ...n, x: p.x ?? 0, y: p.y ?? 0 };
  });
  const laidEdges = edges.map((e) => ({ ...e, points: g.edge(e.from, e.to)?.points ?? [] }));
  const gl = g.graph();
  return { nodes, edges: laidEdges, width: (gl.width as number) || nodeW + 24, height: (gl.height as number) || baseH + 24 };
}

/** nodeAt finds the node that holds seq, or the last one before it. */
export function nodeAt(nodes: FlowNode[], seq: number): FlowNode | undefined {
  // Steps nest in chains from OpenTelemetry (an agent span holds a model
  // span): of the nodes whose range holds seq, the innermost (the one that
  // started last) is the seq's.
  let best: FlowNode | undefined;
  let inside: FlowNode | undefined;
  for (const n of nodes) {
    const end = n.last_seq ?? n.seq;
    if (n.seq <= seq && seq <= end && (!inside || n.seq > inside.seq)) inside = n;
    if (n.seq <= seq && (!best || n.seq > best.seq)) best = n;
  }
  return inside ?? best;
}

function cut(s: string, n: number): string {
  return s.length > n ? s.slice(0, n - 1) + '…' : s;
}

interface Props {
  chainId: string;
  seq: number;
  firstSeq: number;
  lastSeq: number;
  onSelect: (seq: number) => void;
  /** version changes when live events arrive, so the last page reloads. */
  version: number;
}

interface Page {
  from: number;
  flow: Flow;
  /** end is the last seq the page covers (Infinity for the chain's end). */
  end: number;
}

function covers(p: Page | null, seq: number): boolean {
  return !!p && seq >= p.from && seq <= p.end;
}

export function FlowChart({ chainId, seq, firstSeq, lastSeq, onSelect, version }: Props) {
  const [page, setPage] = useState<Page | null>(null);
  const [want, setWant] = useState<number>(Math.max(firstSeq, seq - lookBack));
  const [err, setErr] = useState<unknown>(null);
  const box = useRef<HTMLDivElement>(null);

  // A seq outside the page asks for a page around it.
  useEffect(() => {
    if (!covers(page, seq)) setWant(Math.max(firstSeq, seq - lookBack));
  }, [seq, page]);

  const atEnd = page ? page.end === Infinity : false;
  useEffect(() => {
    const ctl = new AbortController();
    get<Flow>(`chains/${encodeURIComponent(chainId)}/flow`, { from: want, limit: pageNodes }, ctl.signal).then(
      (f) => {
        setErr(null);
        const nodes = f.nodes ?? [];
        const end = !f.next_from ? Infinity : Math.max(want, f.next_from - 1);
        setPage({ from: want, end, flow: { ...f, nodes, edges: f.edges ?? [] } });
      },
      (e) => {
        if ((e as Error).name !== 'AbortError') setErr(e);
      },
    );
    return () => ctl.abort();
    // The page at the chain's end reloads when live events arrive.
  }, [chainId, want, atEnd ? version : 0]);

  const laid = useMemo(() => (page ? layout(page.flow) : null), [page]);
  const selected = useMemo(() => (page ? nodeAt(page.flow.nodes, seq) : undefined), [page, seq]);

  // Keep the selected node in view.
  useEffect(() => {
    const el = box.current;
    if (!el || !laid || !selected) return;
    const n = laid.nodes.find((x) => x.id === selected.id);
    if (!n) return;
    const h = heightOf(n);
    const top = n.y - h / 2;
    if (top < el.scrollTop || top + h > el.scrollTop + el.clientHeight) {
      el.scrollTop = Math.max(0, top - el.clientHeight / 3);
    }
    const left = n.x - nodeW / 2;
    if (left < el.scrollLeft || left + nodeW > el.scrollLeft + el.clientWidth) {
      el.scrollLeft = Math.max(0, left - 20);
    }
  }, [laid, selected?.id]);

  const nodes = page?.flow.nodes ?? [];
  const shownFrom = nodes.length ? nodes[0].seq : want;
  const shownTo = nodes.length ? (nodes[nodes.length - 1].last_seq ?? nodes[nodes.length - 1].seq) : want;
  return (
    <div class="flow">
      <div class="flow-head">
        <span id="flow-range">
          {page ? `${nodes.length} of ${page.flow.total_nodes ?? nodes.length} nodes, events ${shownFrom}–${shownTo} of ${lastSeq}` : 'Loading…'}
          {page && page.from !== want ? ' (loading…)' : ''}
        </span>
        {page && shownFrom > firstSeq ? (
          <button type="button" onClick={() => onSelect(Math.max(firstSeq, shownFrom - 1))}>
            ◀ Earlier steps
          </button>
        ) : null}
        {page && page.end !== Infinity ? (
          <button type="button" onClick={() => onSelect(Math.min(lastSeq, page.end + 1))}>
            Later steps ▶
          </button>
        ) : null}
      </div>
      {err ? <ErrorBox err={err} what="the flowchart" /> : null}
      <div class="flow-canvas" ref={box}>
        {laid ? (
          <svg
            width={laid.width}
            height={laid.height}
            viewBox={`0 0 ${laid.width} ${laid.height}`}
            role="group"
            aria-label={`Flowchart of events ${shownFrom} to ${shownTo}`}
          >
            <defs>
              <marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse">
                <path d="M 0 0 L 10 5 L 0 10 z" class="arrowhead" />
              </marker>
            </defs>
            {laid.edges.map((e) => (
              <g class={'edge edge-' + e.kind} key={e.from + '>' + e.to}>
                <polyline points={e.points.map((p) => `${p.x},${p.y}`).join(' ')} marker-end="url(#arrow)" />
                {e.kind === 'handoff' && e.points.length > 1 ? (
                  <text x={e.points[Math.floor(e.points.length / 2)].x + 6} y={e.points[Math.floor(e.points.length / 2)].y} class="edge-label">
                    handoff
                  </text>
                ) : null}
              </g>
            ))}
            {laid.nodes.map((n) => {
              const [icon, words] = statusLabel(n.status);
              const sel = selected?.id === n.id;
              const h = heightOf(n);
              const att = n.attached ?? [];
              const more = att.length - maxLines + (n.attached_more ?? 0);
              const what = n.step != null ? `step ${n.step}` : n.kind === 'event' ? (n.type ?? 'event') : n.kind.replace(/_/g, ' ');
              const title =
                `${n.label || what} — ${n.agent} — ${what}${n.tool ? ' — tool ' + n.tool : ''}` +
                `${(n.count ?? 1) > 1 ? ' — ' + n.count + ' events' : ''} — ${words}${n.gated ? ' — approval-gated' : ''}` +
                ` — seq ${n.seq}${n.last_seq && n.last_seq !== n.seq ? '–' + n.last_seq : ''}` +
                (att.length ? ' — ' + att.map((a) => `${a.type}: ${a.label}`).join('; ') : '');
              let y = baseH - 11;
              return (
                <g
                  key={n.id}
                  class={`node kind-${n.kind} ${statusClass(n.status)}${sel ? ' selected' : ''}`}
                  transform={`translate(${n.x - nodeW / 2},${n.y - h / 2})`}
                  role="button"
                  // An SVG attribute: lowercase, or the node is not focusable.
                  tabindex={0}
                  aria-label={title}
                  aria-pressed={sel}
                  data-seq={n.seq}
                  data-node={n.id}
                  data-status={n.status}
                  onClick={() => onSelect(n.seq)}
                  onKeyDown={(ev) => {
                    if (ev.key === 'Enter' || ev.key === ' ') {
                      ev.preventDefault();
                      onSelect(n.seq);
                    }
                  }}
                >
                  <title>{title}</title>
                  <rect width={nodeW} height={h} rx="6" />
                  <text x="8" y="17" class="n-label">
                    {(kindIcon[n.kind] ?? '•') + ' ' + cut(n.label || what, 28) + ((n.count ?? 1) > 1 ? ` ×${n.count}` : '')}
                  </text>
                  <text x="8" y="34" class="n-agent">
                    {cut(`${n.agent} · ${what}${n.tool ? ' · ' + n.tool : ''}`, 34)}
                  </text>
                  <text x="8" y={y} class="n-status">
                    {icon + ' ' + words + (sel ? '  ◀ selected' : '')}
                  </text>
                  {n.gated ? (
                    <text x="8" y={(y += lineH)} class="n-gated">
                      ⚑ approval-gated
                    </text>
                  ) : null}
                  {att.slice(0, maxLines).map((a) => (
                    <text x="14" y={(y += lineH)} class={'n-att ' + statusClass(a.status)} key={a.seq}>
                      {cut(`${attIcon[a.type] ?? '•'} ${a.label}`, 34)}
                    </text>
                  ))}
                  {more > 0 ? (
                    <text x="14" y={(y += lineH)} class="n-att">
                      {`+${more} more`}
                    </text>
                  ) : null}
                </g>
              );
            })}
          </svg>
        ) : err ? null : (
          <p class="loading" role="status">
            Loading the flowchart…
          </p>
        )}
        {laid && laid.nodes.length === 0 ? <p class="empty">No events here.</p> : null}
      </div>
    </div>
  );
}
