#!/usr/bin/env python3
"""Redraw the LOaPP Fig. 6 breakdown (where an attach session's time goes, per scheme) from the
records of ``pmo bench suite --study breakdown --json FILE``, with pandas.

    pmo bench suite --study breakdown --workload 2dconv --size tiny --quick --json r.json
    python3 fig6_breakdown.py r.json fig6.svg [WORKLOAD]

Stacked bars, one per scheme, of the Fig. 6 categories' seconds (median of the run's repeats).
The SVG is written by hand so the example needs nothing beyond pandas.
"""

import sys

import pmo

COLOURS = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1"]


def breakdown(df, workload=None):
    """The Fig. 6 table: one row per scheme, one column per category (seconds)."""
    d = df[(df["bench"] == "suite") & (df["study"] == "breakdown")]
    d = d[d["metric"].str.startswith("fig6_")]
    if workload is not None:
        d = d[d["workload"] == workload]
    if d.empty:
        raise SystemExit("no breakdown records (run: pmo bench suite --study breakdown --json F)")
    table = d.pivot_table(index="scheme", columns="metric", values="value", aggfunc="sum")
    order = list(dict.fromkeys(d["scheme"]))  # schemes in the order the suite ran them
    return table.loc[order].fillna(0.0)


def svg(table, title):
    """A stacked-bar chart of `table` as SVG text."""
    w, h, left, top, bottom = 640, 360, 60, 30, 60
    plot_h = h - top - bottom
    totals = table.sum(axis=1)
    ymax = float(totals.max()) or 1.0
    bar_w = (w - left - 160) / max(len(table), 1)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-size="11">',
           f'<text x="{left}" y="18">{title}</text>',
           f'<line x1="{left}" y1="{top}" x2="{left}" y2="{h - bottom}" stroke="black"/>',
           f'<text x="4" y="{top + 4}">{ymax * 1e3:.3g} ms</text>']
    for i, (scheme, row) in enumerate(table.iterrows()):
        x = left + 8 + i * bar_w
        y = h - bottom
        for j, (metric, v) in enumerate(row.items()):
            bh = float(v) / ymax * plot_h
            y -= bh
            out.append(f'<rect x="{x:.1f}" y="{y:.1f}" width="{bar_w * 0.7:.1f}" '
                       f'height="{bh:.1f}" fill="{COLOURS[j % len(COLOURS)]}"><title>{scheme} '
                       f'{metric} {float(v):.6f} s</title></rect>')
        out.append(f'<text x="{x:.1f}" y="{h - bottom + 14}">{scheme}</text>')
    for j, metric in enumerate(table.columns):
        y = top + 14 * j
        out.append(f'<rect x="{w - 150}" y="{y}" width="10" height="10" '
                   f'fill="{COLOURS[j % len(COLOURS)]}"/>')
        out.append(f'<text x="{w - 136}" y="{y + 9}">{metric[5:-2]}</text>')
    out.append("</svg>")
    return "\n".join(out)


def main(argv):
    if len(argv) < 3:
        raise SystemExit(__doc__)
    workload = argv[3] if len(argv) > 3 else None
    df = pmo.load_bench(argv[1])
    table = breakdown(df, workload)
    print(table.to_string())
    with open(argv[2], "w", encoding="utf-8") as f:
        f.write(svg(table, f"Fig. 6 breakdown{' ' + workload if workload else ''} (s)"))
    print(f"figure: {argv[2]}")


if __name__ == "__main__":
    main(sys.argv)
