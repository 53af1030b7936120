"""Write a seeded museum event stream as Parquet or CSV.

    python examples/generate_museum.py 1000000 museum.parquet --seed 1
"""

import argparse

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from cep_gpu.museum import generate_museum


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("n_events", type=int)
    ap.add_argument("out", help="output file (.parquet or .csv)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    events = generate_museum(args.n_events, seed=args.seed)
    # microseconds: the finest timestamp Spark reads from Parquet (`cep-gpu spark`), and what
    # `cep-gpu run` then reads from the same file
    events["ts"] = events["ts"].dt.floor("us").astype("datetime64[us]")
    table = pa.Table.from_pandas(events, preserve_index=False)
    if args.out.endswith(".csv"):
        pacsv.write_csv(table, args.out)
    else:
        pq.write_table(table, args.out)
    print(f"wrote {args.n_events} events to {args.out}")


if __name__ == "__main__":
    main()
