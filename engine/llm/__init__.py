"""Local and remote chat models: the backend protocol (``base``), the model registry and GGUF
checks (``registry``, ``gguf``), llama-cpp-python (``llama_backend``), OpenAI-compatible servers
(``openai_backend``), the single-owner ``worker`` and ``factory.make_backend/make_worker``.

Submodules are imported on demand so that ``import engine`` never loads llama.cpp.

OpenMP wait policy: llama.cpp's CPU threads meet at an OpenMP barrier after every graph node.
With libgomp's default (spin ~300k iterations before sleeping) a 2-thread decode collapses
10-100x as soon as anything else wants the CPU (another app, the embedder, a test run): one
thread spins while its partner is descheduled. Measured on 2 shared cores: 0.1-4 tok/s spinning
vs 18 tok/s passive. So, unless the user chose otherwise, we ask for the passive policy before
llama.cpp (which reads it once, when its library loads) is imported anywhere.
"""

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
