"""Other CEP engines measured beside cep-gpu on the same inputs (``cep-gpu bench seq3 --peers``).

* ``flink``: Apache Flink SQL ``MATCH_RECOGNIZE`` through PyFlink (:mod:`.flink`), batch mode;
  ``flink-stream``: the same engine in streaming mode. Needs Java and the ``peers`` extra in an
  environment of its own (``make peers``).
"""

#: peer name -> (Flink variant, Flink mode) it runs
PEERS = {"flink": ("last", "batch"), "flink-stream": ("skip-to-next", "streaming")}
