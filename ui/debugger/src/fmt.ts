// Formatting helpers: every one returns plain text.
import type { Json } from './api';

export function fmtMs(ms: number | null | undefined): string {
  if (ms == null || !Number.isFinite(ms)) return '—';
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 60_000) return `${(ms / 1000).toFixed(1)} s`;
  const m = Math.floor(ms / 60_000);
  return `${m} min ${Math.round((ms % 60_000) / 1000)} s`;
}

export function fmtInt(n: number | null | undefined): string {
  if (n == null || !Number.isFinite(n)) return '—';
  return Math.round(n).toLocaleString('en-US');
}

export function fmtCost(c: number | null | undefined): string {
  if (c == null || !Number.isFinite(c)) return '—';
  return '$' + (c < 0.01 && c > 0 ? c.toFixed(4) : c.toFixed(3));
}

export function fmtConf(c: number | null | undefined): string {
  if (c == null || !Number.isFinite(c)) return 'none';
  return c.toFixed(2);
}

/** band places a confidence in the spec's threshold bands. */
export function band(c: number | null | undefined): string {
  if (c == null) return 'unknown';
  if (c >= 0.8) return 'proceed';
  if (c >= 0.6) return 'warn';
  if (c >= 0.4) return 'verify';
  return 'block';
}

export function fmtTime(ts: string | undefined): string {
  if (!ts) return '—';
  const d = new Date(ts);
  if (Number.isNaN(d.getTime())) return ts;
  return d.toISOString().replace('T', ' ').replace(/\.\d+Z$/, 'Z');
}

// Characters that do not show as themselves (the class of Go's
// text.Hidden): control characters, format characters (bidirectional
// overrides and isolates, zero-width and tag characters), the line and
// paragraph separators. A model chose much of what the page shows (its
// arguments, its intent): each such character is written as its escape.
const hiddenLines = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u2028\u2029\p{Cf}]/gu;
const hiddenAll = /[\u0000-\u001f\u007f-\u009f\u2028\u2029\p{Cf}]/gu;

function escapeRune(c: string): string {
  const r = c.codePointAt(0) ?? 0;
  if (r < 0x80) return '\\x' + r.toString(16).padStart(2, '0');
  if (r <= 0xffff) return '\\u' + r.toString(16).padStart(4, '0');
  return '\\U' + r.toString(16).padStart(8, '0');
}

/** visible writes every character that does not show as itself as its
 * escape (\x1b, \u202e, \U000e0041); keepLines keeps newlines and tabs. */
export function visible(s: string, keepLines = false): string {
  return s.replace(keepLines ? hiddenLines : hiddenAll, escapeRune);
}

/** pretty renders any JSON value as indented text. */
export function pretty(v: Json | undefined): string {
  if (v === undefined) return '';
  if (typeof v === 'string') return visible(v, true);
  return visible(JSON.stringify(v, null, 2), true);
}

/** short renders a JSON value on one line, cut to n characters. */
export function short(v: Json | undefined, n = 120): string {
  const s = visible(typeof v === 'string' ? v : JSON.stringify(v ?? null));
  return s.length > n ? s.slice(0, n - 1) + '…' : s;
}
