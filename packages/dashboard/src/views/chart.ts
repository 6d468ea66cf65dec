import uPlot from 'uplot';
import 'uplot/dist/uPlot.min.css';

// uPlot, loaded on demand (dynamic import) by the views that draw charts, so the first view's
// JavaScript stays small. Colours come from the theme's CSS variables.

export interface ChartSpec {
  title: string;
  times: number[];
  series: { label: string; values: number[]; color: string }[];
  width: number;
}

export function drawChart(el: HTMLElement, spec: ChartSpec): () => void {
  const css = getComputedStyle(document.documentElement);
  const axis = { stroke: css.getPropertyValue('--muted').trim() || '#666', grid: { stroke: css.getPropertyValue('--line').trim() || '#ddd', width: 1 }, ticks: { show: false } };
  const plot = new uPlot(
    {
      title: spec.title,
      width: spec.width,
      height: 220,
      series: [{}, ...spec.series.map((s) => ({ label: s.label, stroke: s.color, width: 2, points: { show: false } }))],
      axes: [axis, { ...axis, size: 50 }],
      legend: { live: true },
      scales: { x: { time: true } },
    },
    [spec.times, ...spec.series.map((s) => s.values)],
    el,
  );
  const resize = () => plot.setSize({ width: el.clientWidth || spec.width, height: 220 });
  addEventListener('resize', resize);
  return () => {
    removeEventListener('resize', resize);
    plot.destroy();
  };
}
