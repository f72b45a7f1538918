// Two chains side by side, aligned the way `lctl diff` aligns them: the
// server's report lists each difference with the events on both sides.
import { useEffect, useState } from 'preact/hooks';
import type { Difference, DiffReport, EventRef } from './api';
import { get } from './api';
import { ErrorBox, Loading } from './common';
import { fmtInt, short } from './fmt';
import { chainHref } from './route';

const kindText: Record<string, [string, string]> = {
  changed: ['≠', 'changed'],
  added: ['+', 'only in v2'],
  removed: ['−', 'only in v1'],
};

function Ref({ r, chain }: { r?: EventRef; chain: string }) {
  if (!r) return <td class="diff-none">—</td>;
  return (
    <td>
      <a href={chainHref(chain, r.seq)}>seq {r.seq}</a> <code>{r.type}</code> {r.agent}
      {r.subject ? <div class="diff-subject">{r.subject}</div> : null}
      {r.detail ? <div class="diff-detail">{r.detail}</div> : null}
    </td>
  );
}

function Row({ d, rep }: { d: Difference; rep: DiffReport }) {
  const [icon, words] = kindText[d.kind] ?? ['•', d.kind];
  return (
    <tr class={'diff-' + d.kind}>
      <td class="diff-kind">
        <span aria-hidden="true">{icon} </span>
        {words}
      </td>
      <Ref r={d.v1} chain={rep.v1.chain_id} />
      <Ref r={d.v2} chain={rep.v2.chain_id} />
      <td>
        {d.fields?.length ? (
          <ul class="fields">
            {d.fields.map((f, i) => (
              <li key={i}>
                <code>{f.path}</code>: <del>{short(f.v1, 200)}</del> → <ins>{short(f.v2, 200)}</ins>
              </li>
            ))}
          </ul>
        ) : null}
      </td>
    </tr>
  );
}

export function DiffView({ a, b }: { a: string; b: string }) {
  const [rep, setRep] = useState<DiffReport | null>(null);
  const [err, setErr] = useState<unknown>(null);
  useEffect(() => {
    const ctl = new AbortController();
    setRep(null);
    setErr(null);
    get<DiffReport>('diff', { a, b }, ctl.signal).then(setRep, (e) => {
      if ((e as Error).name !== 'AbortError') setErr(e);
    });
    return () => ctl.abort();
  }, [a, b]);
  return (
    <main id="main" tabIndex={-1} class="diff-view">
      <h1>
        Diff: <a href={chainHref(a)}>{a}</a> (v1) ↔ <a href={chainHref(b)}>{b}</a> (v2)
      </h1>
      {err ? <ErrorBox err={err} what="the diff" /> : null}
      {!rep && !err ? <Loading what="the diff" /> : null}
      {rep ? (
        <>
          <p id="diff-summary" role="status">
            {rep.identical
              ? 'The chains are identical (ignoring ' + (rep.ignored ?? []).join(', ') + ').'
              : `${fmtInt(rep.changed)} changed, ${fmtInt(rep.added)} only in v2, ${fmtInt(rep.removed)} only in v1 — v1 has ${fmtInt(rep.v1.events)} events, v2 ${fmtInt(rep.v2.events)}.`}
            {!rep.aligned ? ' The chains were too different to align; the rest is compared by position.' : ''}
          </p>
          {rep.first ? (
            <p>
              They diverge first at{' '}
              {rep.first.v1 ? `v1 seq ${rep.first.v1.seq} (${rep.first.v1.type})` : 'the end of v1'} /{' '}
              {rep.first.v2 ? `v2 seq ${rep.first.v2.seq} (${rep.first.v2.type})` : 'the end of v2'}.
            </p>
          ) : null}
          {rep.differences?.length ? (
            <div class="table-wrap">
              <table class="diff">
                <caption class="sr-only">Differences in chain order</caption>
                <thead>
                  <tr>
                    <th scope="col">Difference</th>
                    <th scope="col">v1: {rep.v1.chain_id}</th>
                    <th scope="col">v2: {rep.v2.chain_id}</th>
                    <th scope="col">Fields</th>
                  </tr>
                </thead>
                <tbody>
                  {rep.differences.slice(0, 2000).map((d, i) => (
                    <Row key={i} d={d} rep={rep} />
                  ))}
                </tbody>
              </table>
            </div>
          ) : null}
          {rep.differences?.length > 2000 ? <p>First 2,000 of {fmtInt(rep.differences.length)} differences.</p> : null}
        </>
      ) : null}
    </main>
  );
}
