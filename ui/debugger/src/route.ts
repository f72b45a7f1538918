// Client-side routes live in the URL's hash, so the server serves one page:
// #/ (chain list), #/chain/{id}?seq=N, #/diff/{a}/{b}, #/approvals.
import { useEffect, useState } from 'preact/hooks';

export type Route =
  | { name: 'list'; q: URLSearchParams }
  | { name: 'chain'; id: string; seq?: number }
  | { name: 'diff'; a: string; b: string }
  | { name: 'approvals'; run?: string }
  | { name: 'notfound'; path: string };

/** parseRoute reads a location hash. */
export function parseRoute(hash: string): Route {
  const h = hash.replace(/^#/, '') || '/';
  const [path, query = ''] = h.split('?', 2);
  const q = new URLSearchParams(query);
  const parts = path.split('/').filter(Boolean).map(safeDecode);
  if (parts.length === 0) return { name: 'list', q };
  if (parts[0] === 'chain' && parts.length === 2) {
    const s = Number(q.get('seq'));
    return { name: 'chain', id: parts[1], seq: Number.isFinite(s) && s > 0 ? Math.floor(s) : undefined };
  }
  if (parts[0] === 'diff' && parts.length === 3) return { name: 'diff', a: parts[1], b: parts[2] };
  if (parts[0] === 'approvals' && parts.length === 1) return { name: 'approvals', run: q.get('run') || undefined };
  return { name: 'notfound', path };
}

function safeDecode(s: string): string {
  try {
    return decodeURIComponent(s);
  } catch {
    return s;
  }
}

/** chainHref links to a chain, optionally at a seq. */
export function chainHref(id: string, seq?: number): string {
  return '#/chain/' + encodeURIComponent(id) + (seq ? '?seq=' + seq : '');
}

/** diffHref links to the diff of two chains. */
export function diffHref(a: string, b: string): string {
  return '#/diff/' + encodeURIComponent(a) + '/' + encodeURIComponent(b);
}

/** replaceSeq records the selected seq in the URL without a history entry. */
export function replaceSeq(id: string, seq: number): void {
  const href = chainHref(id, seq);
  if (location.hash !== href) history.replaceState(null, '', href);
}

/** useRoute follows the location hash. */
export function useRoute(): Route {
  const [route, setRoute] = useState(() => parseRoute(location.hash));
  useEffect(() => {
    const on = () => setRoute(parseRoute(location.hash));
    addEventListener('hashchange', on);
    return () => removeEventListener('hashchange', on);
  }, []);
  return route;
}
