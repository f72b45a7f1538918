// The LCTL visual debugger: one page, routes in the URL's hash.
import { render } from 'preact';
import { useEffect, useState } from 'preact/hooks';
import type { Info } from './api';
import { ApiError, get, setToken } from './api';
import { ApprovalsView } from './Approvals';
import { ChainListView } from './ChainList';
import { ChainView } from './ChainView';
import { ErrorBox, Loading } from './common';
import { DiffView } from './DiffView';
import { chainHref, useRoute } from './route';
import './styles.css';

/** LoadError is the page for a chain file that did not load. */
function LoadError({ e }: { e: NonNullable<Info['load_error']> }) {
  return (
    <main id="main" tabIndex={-1} class="load-error">
      <h1>
        <span aria-hidden="true">✖ </span>The chain file could not be loaded
      </h1>
      <div role="alert" class="errorbox">
        <p>
          File: <code id="load-error-file">{e.file}</code>
        </p>
        <p id="load-error-message">{e.message}</p>
      </div>
      <p>Fix the file (or check it with <code>lctl verify</code>) and start <code>lctl debug</code> again.</p>
    </main>
  );
}

/** SignIn asks for a bearer token when the server wants one to read. */
function SignIn({ onDone, refused, why }: { onDone: () => void; refused: boolean; why: string }) {
  const [t, setT] = useState('');
  return (
    <main id="main" tabIndex={-1}>
      <h1>Sign in</h1>
      <form
        class="token-form"
        aria-label="Bearer token"
        onSubmit={(ev) => {
          ev.preventDefault();
          setToken(t.trim());
          onDone();
        }}
      >
        <p>{refused ? 'The server did not accept that token.' : 'This debugger needs a bearer token.'}</p>
        {why ? (
          <p id="signin-why" class="hint">
            {why}
          </p>
        ) : null}
        <label>
          Bearer token{' '}
          <input id="signin-token" type="password" autocomplete="off" value={t} onInput={(ev) => setT((ev.target as HTMLInputElement).value)} />
        </label>{' '}
        <button type="submit">Sign in</button>
        <p class="hint">Kept in this tab only (sessionStorage).</p>
      </form>
    </main>
  );
}

let redirected = false;

function App() {
  const route = useRoute();
  const [info, setInfo] = useState<Info | null>(null);
  const [err, setErr] = useState<unknown>(null);
  const [tries, setTries] = useState(0);

  useEffect(() => {
    get<Info>('info').then(
      (i) => {
        setErr(null);
        setInfo(i);
      },
      setErr,
    );
  }, [tries]);

  useEffect(() => {
    if (info?.title) document.title = `${info.title} — LCTL debugger`;
  }, [info?.title]);

  // `lctl debug FILE` with one chain opens that chain straight away.
  useEffect(() => {
    if (redirected || !info || info.load_error || info.mode !== 'file' || info.chains !== 1 || route.name !== 'list' || [...route.q.keys()].length) return;
    redirected = true;
    get<{ chains: { id: string }[] }>('chains', { limit: 1 }).then(
      (r) => {
        if (r.chains?.[0]) location.replace(chainHref(r.chains[0].id));
      },
      () => {},
    );
  }, [info, route]);

  let body;
  if (err instanceof ApiError && err.status === 401) {
    body = <SignIn refused={tries > 0} why={err.message} onDone={() => setTries((n) => n + 1)} />;
  } else if (err) {
    body = (
      <main id="main" tabIndex={-1}>
        <h1>LCTL debugger</h1>
        <ErrorBox err={err} what="the debugger's information" />
      </main>
    );
  } else if (!info) {
    body = (
      <main id="main" tabIndex={-1}>
        <Loading what="the debugger" />
      </main>
    );
  } else if (info.load_error) {
    body = <LoadError e={info.load_error} />;
  } else {
    switch (route.name) {
      case 'list':
        body = <ChainListView initial={route.q} />;
        break;
      case 'chain':
        body = <ChainView key={route.id} id={route.id} seq={route.seq} canCancel={!!info.can_cancel} />;
        break;
      case 'diff':
        body = <DiffView a={route.a} b={route.b} />;
        break;
      case 'approvals':
        body = <ApprovalsView run={route.run} auth={info.auth} />;
        break;
      default:
        body = (
          <main id="main" tabIndex={-1}>
            <h1>Not found</h1>
            <p>
              Nothing at <code>{route.path}</code>. <a href="#/">Go to the chains</a>.
            </p>
          </main>
        );
    }
  }

  return (
    <>
      <a class="skip" href="#main" onClick={(ev) => {
        ev.preventDefault();
        document.getElementById('main')?.focus();
      }}>
        Skip to content
      </a>
      <header class="top">
        <span class="brand">LCTL debugger</span>
        {info ? (
          <span class="mode">
            {info.mode === 'cluster' ? 'cluster' : 'file'}: {info.title}
          </span>
        ) : null}
        <nav aria-label="Views">
          <a href="#/" aria-current={route.name === 'list' ? 'page' : undefined}>
            Chains
          </a>
          {info?.approvals ? (
            <a href="#/approvals" aria-current={route.name === 'approvals' ? 'page' : undefined}>
              Approvals
            </a>
          ) : null}
        </nav>
      </header>
      {body}
    </>
  );
}

render(<App />, document.getElementById('app')!);
