// Charts drawn with uPlot (canvas). Every chart has a text alternative: an
// aria-label on the figure and a data table beside it, so nothing is only in
// the picture.
import { useEffect, useRef } from 'preact/hooks';
import uPlot from 'uplot';
import 'uplot/dist/uPlot.min.css';

interface PlotProps {
  opts: Omit<uPlot.Options, 'width' | 'height'>;
  data: uPlot.AlignedData;
  height: number;
  label: string;
}

/** Plot mounts a uPlot chart and sizes it to its container. */
export function Plot({ opts, data, height, label }: PlotProps) {
  const ref = useRef<HTMLDivElement>(null);
  useEffect(() => {
    const el = ref.current;
    if (!el) return;
    const width = Math.max(240, Math.floor(el.clientWidth || 480));
    const plot = new uPlot({ ...opts, width, height } as uPlot.Options, data, el);
    const ro = typeof ResizeObserver !== 'undefined'
      ? new ResizeObserver(() => {
          const w = Math.max(240, Math.floor(el.clientWidth));
          if (Math.abs(w - plot.width) > 4) plot.setSize({ width: w, height });
        })
      : null;
    ro?.observe(el);
    return () => {
      ro?.disconnect();
      plot.destroy();
    };
  }, [opts, data, height]);
  return <div class="plot" ref={ref} role="img" aria-label={label} />;
}

const ink = '#1f4e8c';
const thresholdColors = ['#2e7d32', '#b26a00', '#b3261e'];

/** confidenceOpts draws one fact's confidence over seq with the spec's
 * thresholds (0.80 proceed, 0.60 warn, 0.40 block) as dashed lines. */
export function confidenceOpts(title: string): Omit<uPlot.Options, 'width' | 'height'> {
  return {
    title,
    scales: { x: { time: false }, y: { range: [0, 1] } },
    legend: { show: true },
    cursor: { drag: { x: false, y: false } },
    axes: [
      { label: 'seq', stroke: 'currentColor', grid: { stroke: '#8884' } },
      { label: 'confidence', stroke: 'currentColor', grid: { stroke: '#8884' } },
    ],
    series: [
      { label: 'seq' },
      {
        label: 'confidence',
        stroke: ink,
        width: 2,
        points: { show: true, size: 7 },
        paths: uPlot.paths.stepped!({ align: 1 }),
      },
      { label: 'proceed 0.80', stroke: thresholdColors[0], dash: [6, 4], width: 1, points: { show: false } },
      { label: 'warn 0.60', stroke: thresholdColors[1], dash: [2, 4], width: 1, points: { show: false } },
      { label: 'block 0.40', stroke: thresholdColors[2], dash: [10, 4], width: 1, points: { show: false } },
    ],
  };
}

/** confidenceData turns a fact's points into uPlot's columns. */
export function confidenceData(points: { seq: number; value: number }[]): uPlot.AlignedData {
  const xs = points.map((p) => p.seq);
  const ys = points.map((p) => p.value);
  const flat = (v: number) => xs.map(() => v);
  return [xs, ys, flat(0.8), flat(0.6), flat(0.4)];
}

/** barOpts draws one bar per name. */
export function barOpts(title: string, names: string[], unit: string, fmt: (v: number) => string): Omit<uPlot.Options, 'width' | 'height'> {
  return {
    title,
    scales: { x: { time: false, range: [-0.5, names.length - 0.5] }, y: { range: (_u, _min, max) => [0, max > 0 ? max * 1.1 : 1] } },
    legend: { show: false },
    cursor: { drag: { x: false, y: false } },
    axes: [
      {
        stroke: 'currentColor',
        grid: { show: false },
        splits: () => names.map((_, i) => i),
        values: (_u, splits) => splits.map((i) => names[i] ?? ''),
      },
      { label: unit, stroke: 'currentColor', grid: { stroke: '#8884' }, values: (_u, splits) => splits.map(fmt) },
    ],
    series: [
      { label: 'agent' },
      { label: unit, fill: '#1f4e8ccc', stroke: ink, paths: uPlot.paths.bars!({ size: [0.6, 80] }), points: { show: false } },
    ],
  };
}
