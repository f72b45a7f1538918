// Summaries of a chain: confidence per fact over time, and where the time
// and money went (per agent, and the slowest steps).
import { useEffect, useMemo, useState } from 'preact/hooks';
import type { ChainDetail, ConfidenceReport, FactConfidence } from './api';
import { get } from './api';
import { barOpts, confidenceData, confidenceOpts, Plot } from './Charts';
import { ErrorBox, Loading } from './common';
import { fmtConf, fmtCost, fmtInt, fmtMs } from './fmt';

const factsShown = 12;

function FactTimeline({ f, onSelect }: { f: FactConfidence; onSelect: (seq: number) => void }) {
  const data = useMemo(() => confidenceData(f.points), [f]);
  const opts = useMemo(() => confidenceOpts(`${f.id}: ${f.text}`.slice(0, 90)), [f]);
  const finalText = `${fmtConf(f.final)} (${f.band}${f.labels?.length ? ', ' + f.labels.join(', ') : ''})`;
  return (
    <article class="fact" aria-labelledby={'fact-' + f.id}>
      <h3 id={'fact-' + f.id}>
        {f.id} <span class="fact-text">{f.text}</span>
      </h3>
      <p>
        Final confidence: <strong>{finalText}</strong>
        {f.blocked_seq ? (
          <>
            {' '}
            <span class="status st-denied">
              <span aria-hidden="true">⊘</span> blocked at seq {f.blocked_seq}
            </span>
          </>
        ) : null}
      </p>
      {f.points.length > 0 ? (
        <Plot
          opts={opts}
          data={data}
          height={180}
          label={`Confidence of ${f.id} over seq: ${f.points.map((p) => `${p.value.toFixed(2)} at ${p.seq}`).join(', ')}`}
        />
      ) : null}
      {f.consensus ? (
        <p>
          Consensus {f.consensus.score.toFixed(2)} from {f.consensus.assessments.length} agents (spread{' '}
          {f.consensus.conflict.toFixed(2)}
          {f.consensus.agreement != null ? `, recorded agreement ${f.consensus.agreement.toFixed(2)}` : ''}):{' '}
          {f.consensus.assessments.map((a) => `${a.agent} ${a.confidence.toFixed(2)}`).join(', ')}
        </p>
      ) : null}
      <details>
        <summary>Timeline of {f.id} as a table</summary>
        <table>
          <thead>
            <tr>
              <th scope="col">Seq</th>
              <th scope="col">Agent</th>
              <th scope="col">What</th>
              <th scope="col">Confidence</th>
            </tr>
          </thead>
          <tbody>
            {f.points.map((p, i) => (
              <tr key={i}>
                <td class="num">
                  <button type="button" class="link" onClick={() => onSelect(p.seq)}>
                    {p.seq}
                  </button>
                </td>
                <td>{p.agent}</td>
                <td>
                  {p.kind === 'hop' ? 'decay (hop)' : p.kind}
                  {p.blocked ? ' ⊘ blocked' : ''}
                  {p.reason ? ` — ${p.reason}` : ''}
                </td>
                <td class="num">{p.value.toFixed(2)}</td>
              </tr>
            ))}
          </tbody>
        </table>
      </details>
    </article>
  );
}

export function ConfidenceView({ chainId, version, onSelect }: { chainId: string; version: number; onSelect: (seq: number) => void }) {
  const [rep, setRep] = useState<ConfidenceReport | null>(null);
  const [err, setErr] = useState<unknown>(null);
  const [all, setAll] = useState(false);
  useEffect(() => {
    const ctl = new AbortController();
    get<ConfidenceReport>(`chains/${encodeURIComponent(chainId)}/confidence`, {}, ctl.signal).then(
      (r) => {
        setErr(null);
        setRep(r);
      },
      (e) => {
        if ((e as Error).name !== 'AbortError') setErr(e);
      },
    );
    return () => ctl.abort();
  }, [chainId, version]);
  if (err) return <ErrorBox err={err} what="the confidence timeline" />;
  if (!rep) return <Loading what="confidence" />;
  const facts = rep.facts ?? [];
  if (facts.length === 0) return <p>This chain records no facts.</p>;
  return (
    <div class="confidence">
      <p>
        Decay {rep.decay_rate} per hop, {rep.hops} hops. Thresholds: 0.80 proceed, 0.60 warn, 0.40 verify; below 0.40 blocks.
      </p>
      {rep.warnings?.length ? (
        <details class="warnings" open={rep.warnings.length <= 5}>
          <summary>
            <span aria-hidden="true">⚠ </span>
            {rep.warnings.length} warning{rep.warnings.length === 1 ? '' : 's'}
          </summary>
          <ul>
            {rep.warnings.slice(0, 500).map((w, i) => (
              <li key={i}>{w}</li>
            ))}
          </ul>
          {rep.warnings.length > 500 ? <p>First 500 of {rep.warnings.length}.</p> : null}
        </details>
      ) : null}
      <div class="fact-grid">
        {(all ? facts : facts.slice(0, factsShown)).map((f) => (
          <FactTimeline key={f.id} f={f} onSelect={onSelect} />
        ))}
      </div>
      {!all && facts.length > factsShown ? (
        <button type="button" onClick={() => setAll(true)}>
          Show all {facts.length} facts
        </button>
      ) : null}
    </div>
  );
}

export function PerfView({ detail, onSelect }: { detail: ChainDetail; onSelect: (seq: number) => void }) {
  const b = detail.bottlenecks;
  const st = detail.stats;
  const byAgent = b?.by_agent ?? [];
  const names = byAgent.map((a) => a.agent);
  const durOpts = useMemo(() => barOpts('Step time per agent', names, 'seconds', (v) => v.toFixed(1)), [names.join('\n')]);
  const durData = useMemo(() => [names.map((_, i) => i), byAgent.map((a) => a.duration_ms / 1000)] as [number[], number[]], [byAgent]);

  // Cost per agent when the server reports it; otherwise per model.
  const costRows = (st?.cost_by_agent?.map((c) => ({ name: c.agent, cost: c.cost, tokens: (c.input ?? 0) + (c.output ?? 0) })) ??
    st?.cost_by_model?.map((c) => ({ name: c.model, cost: c.cost, tokens: c.input + c.output })) ??
    []) as { name: string; cost: number | null; tokens: number }[];
  const costBy = st?.cost_by_agent ? 'agent' : 'model';
  const costNames = costRows.map((c) => c.name);
  const priced = costRows.some((c) => c.cost != null);
  const costOpts = useMemo(
    () => barOpts(priced ? `Cost per ${costBy}` : `Tokens per ${costBy}`, costNames, priced ? 'USD' : 'tokens', (v) => (priced ? '$' + v.toFixed(3) : fmtInt(v))),
    [costNames.join('\n'), priced, costBy],
  );
  const costData = useMemo(
    () => [costRows.map((_, i) => i), costRows.map((c) => (priced ? (c.cost ?? 0) : c.tokens))] as [number[], number[]],
    [costRows.map((c) => `${c.name}:${c.cost}:${c.tokens}`).join('\n')],
  );

  return (
    <div class="perf">
      <div class="charts">
        <figure>
          {byAgent.length ? (
            <Plot
              opts={durOpts}
              data={durData}
              height={220}
              label={'Step time per agent: ' + byAgent.map((a) => `${a.agent} ${fmtMs(a.duration_ms)}`).join(', ')}
            />
          ) : (
            <p>No step timings.</p>
          )}
          <table>
            <caption>Time per agent</caption>
            <thead>
              <tr>
                <th scope="col">Agent</th>
                <th scope="col">Steps</th>
                <th scope="col">Time</th>
                <th scope="col">Share</th>
              </tr>
            </thead>
            <tbody>
              {byAgent.map((a) => (
                <tr key={a.agent}>
                  <th scope="row">{a.agent}</th>
                  <td class="num">{a.steps}</td>
                  <td class="num">{fmtMs(a.duration_ms)}</td>
                  <td class="num">{Math.round(a.share * 100)}%</td>
                </tr>
              ))}
            </tbody>
          </table>
        </figure>
        <figure>
          {costRows.length ? (
            <Plot
              opts={costOpts}
              data={costData}
              height={220}
              label={`Cost per ${costBy}: ` + costRows.map((c) => `${c.name} ${fmtCost(c.cost)}`).join(', ')}
            />
          ) : (
            <p>No token usage recorded.</p>
          )}
          <table>
            <caption>Cost per {costBy}</caption>
            <thead>
              <tr>
                <th scope="col">{costBy === 'agent' ? 'Agent' : 'Model'}</th>
                <th scope="col">Tokens</th>
                <th scope="col">Cost</th>
              </tr>
            </thead>
            <tbody>
              {costRows.map((c) => (
                <tr key={c.name}>
                  <th scope="row">{c.name}</th>
                  <td class="num">{fmtInt(c.tokens)}</td>
                  <td class="num">{c.cost == null ? 'unpriced' : fmtCost(c.cost)}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </figure>
      </div>
      <h3>Bottleneck steps</h3>
      {b?.steps?.length ? (
        <>
          <ol class="bottlenecks">
            {b.steps.map((s, i) => (
              <li key={i}>
                <button type="button" class="link" onClick={() => onSelect(s.start_seq)}>
                  {s.agent} (step {s.step}
                  {s.tool ? `, ${s.tool}` : ''}): {fmtMs(s.duration_ms)} ({Math.round(s.share * 100)}%)
                  {s.unfinished ? ' — unfinished' : ''}
                </button>
              </li>
            ))}
          </ol>
          {b.recommendation ? <p>{b.recommendation}</p> : null}
        </>
      ) : (
        <p>No finished steps.</p>
      )}
    </div>
  );
}
