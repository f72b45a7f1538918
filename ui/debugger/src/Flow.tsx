// The flowchart of a chain: agents' steps as nodes in order, tool calls and
// errors attached, handoffs between agents as edges. A chain where several
// agents take steps (a crew) is drawn in lanes, a column per agent, one row
// per node in chain order, handoffs as edges between lanes labelled with
// their contract results; otherwise it is laid out with dagre. Drawn as
// SVG. Long chains are shown a window of events at a time.
import { useEffect, useMemo, useRef, useState } from 'preact/hooks';
import dagre from '@dagrejs/dagre';
import type { Flow, FlowEdge, FlowNode, Handoff, Routing } from './api';
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

/** crewLines are the node's routing, stream and handoff lines. */
function crewLines(n: FlowNode): { cls: string; text: string }[] {
  const out: { cls: string; text: string }[] = [];
  const rs = n.routing ?? [];
  if (rs.length) {
    const r = rs[rs.length - 1];
    out.push({ cls: 'n-route' + (r.failure_code ? ' st-warn' : ''), text: routingText(r) + (rs.length > 1 ? ` (${rs.length} decisions)` : '') });
  }
  const ss = n.streams ?? [];
  if (ss.length) {
    const last = ss[ss.length - 1];
    out.push({
      cls: 'n-stream' + (last.status !== 'ok' ? ' st-error' : ''),
      text: `≋ stream ${last.status}, ${last.chunks} chunks` + (ss.length > 1 ? ` (${ss.length} streams)` : ''),
    });
  }
  if (n.handoff) out.push({ cls: 'n-handoff ' + (n.handoff.status === 'refused' ? 'st-error' : ''), text: handoffLine(n.handoff) });
  return out;
}

function shortModel(m: string): string {
  const i = m.lastIndexOf('#');
  return i >= 0 ? m.slice(i + 1) : m;
}

/** routingText says which model served the step and why. */
export function routingText(r: Routing): string {
  const model = shortModel(r.model || r.decision);
  if (r.failure_code) return `↪ ${model} after ${r.failure_code}`;
  return `↪ ${model}: ${r.reason || r.rule || 'routed'}`;
}

/** contractsText lists a handoff's contract results. */
export function contractsText(h: Handoff): string {
  const cs = h.contracts ?? [];
  if (!cs.length) return 'no contracts checked';
  return cs.map((c) => `${c.contract} ${c.direction} ${c.status === 'passed' ? '✓' : '✗'} ${c.status}`).join(', ');
}

function violationsText(h: Handoff): string {
  return (h.contracts ?? [])
    .flatMap((c) => (c.violations ?? []).map((v) => `${c.contract} ${c.direction}: ${v.subject ? v.subject + ': ' : ''}${v.message}`))
    .join('; ');
}

function handoffLine(h: Handoff): string {
  if (h.status === 'refused') {
    const failed = (h.contracts ?? []).find((c) => c.status !== 'passed');
    return `⇄ refused: ${failed ? failed.contract + ' ' + failed.direction + ' ✗' : 'contract ✗'}`;
  }
  if (h.status === 'passed') return `⇄ to ${h.to}: contracts ✓`;
  return `⇄ to ${h.to}: ${h.status}`;
}

/** edgeText is the label of a handoff edge. */
function edgeText(e: FlowEdge): string {
  if (!e.handoff) return 'handoff';
  const cs = e.handoff.contracts ?? [];
  const failed = cs.filter((c) => c.status !== 'passed').length;
  return `⇄ handoff to ${e.handoff.to}: ` + (cs.length === 0 ? 'no contracts' : failed ? `${failed} contract(s) failed` : `contracts passed (${cs.length})`);
}

function edgeTitle(e: FlowEdge): string {
  const h = e.handoff;
  if (!h) return 'handoff (the agent changed)';
  const v = violationsText(h);
  return `handoff ${h.from} → ${h.to} at seq ${h.seq}${h.depth != null ? ', depth ' + h.depth : ''}: ${h.summary} — contracts: ${contractsText(h)}${v ? ' — violations: ' + v : ''}`;
}

function heightOf(n: FlowNode): number {
  return baseH + attachedLines(n) * lineH + (n.gated ? lineH : 0) + crewLines(n).length * lineH;
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
  nodes: (FlowNode & { x: number; y: number; drawnLane?: string })[];
  edges: (FlowEdge & { points: { x: number; y: number }[]; label?: { x: number; y: number; anchor?: string } })[];
  width: number;
  height: number;
  /** lanes, when drawn in lanes: each agent's column. */
  lanes?: { agent: string; type: string; x: number; width: number }[];
}

const laneW = nodeW + 36;
const laneHead = 44;
const rowGap = 22;

/** inLanes tells a flow where several agents take steps. */
function inLanes(flow: Flow): boolean {
  return (flow.lanes ?? []).filter((l) => l.steps > 0).length >= 2;
}

/** runLane is the one lane of the agents that take no step (the
 * orchestrator's run events, the system's checkpoints). */
export const runLane = 'run';

/** laneOf is the lane a node is drawn in. */
function laneOf(n: FlowNode, stepping: Set<string>): string {
  const l = n.lane || n.agent;
  return stepping.has(l) ? l : runLane;
}

/** laneLayout puts each agent that takes steps in a column (the others
 * share the run lane, first) and each node on a row of its own, in chain
 * order: an edge's horizontal run is on its source's row or in the gap
 * below it, where no other node is. */
function laneLayout(flow: Flow): Laid {
  const stepping = new Set((flow.lanes ?? []).filter((l) => l.steps > 0).map((l) => l.agent));
  const present = new Set(flow.nodes.map((n) => laneOf(n, stepping)));
  const order: string[] = present.has(runLane) ? [runLane] : [];
  for (const l of flow.lanes ?? []) if (present.has(l.agent) && stepping.has(l.agent)) order.push(l.agent);
  const others = [...new Set(flow.nodes.map((n) => n.lane || n.agent).filter((a) => !stepping.has(a)))];
  const types = new Map((flow.lanes ?? []).map((l) => [l.agent, l.type]));
  types.set(runLane, others.join(', '));
  const col = new Map(order.map((a, i) => [a, i]));
  const lanes = order.map((agent, i) => ({ agent, type: types.get(agent) ?? '', x: 12 + i * laneW, width: laneW - 8 }));
  let y = laneHead + 14;
  const nodes = flow.nodes.map((n) => {
    const h = heightOf(n);
    const at = { ...n, x: 12 + (col.get(laneOf(n, stepping)) ?? 0) * laneW + (laneW - 8) / 2, y: y + h / 2, drawnLane: laneOf(n, stepping) };
    y += h + rowGap;
    return at;
  });
  const byId = new Map(nodes.map((n) => [n.id, n]));
  const edges: Laid['edges'] = [];
  for (const e of flow.edges ?? []) {
    const a = byId.get(e.from);
    const b = byId.get(e.to);
    if (!a || !b || a === b) continue;
    const ha = heightOf(a);
    const hb = heightOf(b);
    const bottom = a.y + ha / 2;
    const top = b.y - hb / 2;
    if (e.handoff && a.x !== b.x) {
      // From the side of the handing step, along its row, down into the
      // receiver.
      const sx = a.x + (b.x > a.x ? nodeW / 2 : -nodeW / 2);
      // The label starts at the step's side, above the run (the row
      // holds no other node).
      edges.push({
        ...e,
        points: [{ x: sx, y: a.y }, { x: b.x, y: a.y }, { x: b.x, y: top }],
        label: { x: sx + (b.x > a.x ? 6 : -6), y: a.y - 6, anchor: b.x > a.x ? 'start' : 'end' },
      });
    } else if (a.x === b.x) {
      edges.push({ ...e, points: [{ x: a.x, y: bottom }, { x: b.x, y: top }], label: { x: a.x + 8, y: (bottom + top) / 2 } });
    } else {
      const mid = bottom + rowGap / 2;
      edges.push({
        ...e,
        points: [{ x: a.x, y: bottom }, { x: a.x, y: mid }, { x: b.x, y: mid }, { x: b.x, y: top }],
        label: { x: (a.x + b.x) / 2, y: mid - 3 },
      });
    }
  }
  return { nodes, edges, width: 24 + order.length * laneW, height: y + 12, lanes };
}

function layout(flow: Flow): Laid {
  if (inLanes(flow)) return laneLayout(flow);
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
  const laidEdges = edges.map((e) => {
    const points = g.edge(e.from, e.to)?.points ?? [];
    const m = points[Math.floor(points.length / 2)];
    return { ...e, points, label: m ? { x: m.x + 6, y: m.y } : undefined };
  });
  const gl = g.graph();
  return { nodes, edges: laidEdges, width: (gl.width as number) || nodeW + 24, height: (gl.height as number) || baseH + 24 };
}

/** nodeAt finds the node that holds seq, or the last one before it. */
export function nodeAt(nodes: FlowNode[], seq: number): FlowNode | undefined {
  // Steps nest in chains from OpenTelemetry (an agent span holds a model
  // span): of the nodes whose range holds seq, the innermost (the one that
  // started last) is the seq's.
  // A crew step also holds the routing decisions and the stream recorded
  // before its step_start.
  let best: FlowNode | undefined;
  let inside: FlowNode | undefined;
  for (const n of nodes) {
    const end = n.last_seq ?? n.seq;
    const start = Math.min(n.seq, ...(n.routing ?? []).map((r) => r.seq), ...(n.streams ?? []).map((x) => x.seq));
    if (start <= seq && seq <= end && (!inside || n.seq > inside.seq)) inside = n;
    if (start <= seq && (!best || n.seq > best.seq)) best = n;
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
            {(laid.lanes ?? []).map((l, i) => (
              <g class={'lane' + (i % 2 ? ' lane-odd' : '')} data-lane={l.agent} key={'lane ' + l.agent}>
                <rect x={l.x} y={4} width={l.width} height={laid.height - 8} rx="8" class="lane-band" />
                <text x={l.x + 10} y={22} class="lane-name">
                  {l.agent === runLane ? 'run events' : cut(l.agent, 30)}
                </text>
                <text x={l.x + 10} y={38} class="lane-type">
                  {cut(l.type, 38)}
                </text>
              </g>
            ))}
            {laid.edges.map((e) => (
              <g
                class={'edge edge-' + e.kind + (e.handoff && e.handoff.status !== 'passed' ? ' edge-failed' : '')}
                key={e.from + '>' + e.to + ' ' + e.kind}
                data-from={e.from}
                data-to={e.to}
                data-contracts={e.handoff ? contractsText(e.handoff) : undefined}
              >
                {e.kind === 'handoff' ? <title>{edgeTitle(e)}</title> : null}
                <polyline points={e.points.map((p) => `${p.x},${p.y}`).join(' ')} marker-end="url(#arrow)" />
                {e.kind === 'handoff' && e.label ? (
                  <text x={e.label.x} y={e.label.y} class="edge-label" text-anchor={e.label.anchor ?? (laid.lanes ? 'middle' : 'start')}>
                    {edgeText(e)}
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
              const crew = crewLines(n);
              const title =
                `${n.label || what} — ${n.agent} — ${what}${n.tool ? ' — tool ' + n.tool : ''}` +
                (n.routing ?? [])
                  .map((r) => ` — routed to ${r.model || r.decision}${r.failed_model ? ' after ' + r.failed_model + ' failed ' + r.failure_code : ''}${r.reason ? ' (' + r.reason + ')' : ''}`)
                  .join('') +
                (n.handoff ? ` — handoff to ${n.handoff.to} ${n.handoff.status}: ${contractsText(n.handoff)}` : '') +
                (n.handoff && violationsText(n.handoff) ? ' — violations: ' + violationsText(n.handoff) : '') +
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
                  data-lane={n.drawnLane ?? n.lane ?? n.agent}
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
                  {crew.map((l) => (
                    <text x="8" y={(y += lineH)} class={l.cls} key={l.cls}>
                      {cut(l.text, 36)}
                    </text>
                  ))}
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
