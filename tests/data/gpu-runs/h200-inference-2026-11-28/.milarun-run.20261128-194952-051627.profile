{
    "*": {
        "partition_scheme": {
            "type": "per-gpu",
            "cgroup": "cpuset,memory:student{CUDA_VISIBLE_DEVICES}",
            "optional": true
        },
        "arguments": {
            "--min-slices": 30
        },
        "max_duration": 900,
        "tags": [
            "inference"
        ]
    },
    "llm-decode-1b": {
        "experiment": "milabench.models.llm_decode:main",
        "arguments": {
            "--model": "1b",
            "--precision": "bf16",
            "--batch-size": 1,
            "--sweep": "8,32,128",
            "--input-len": 1024,
            "--output-len": 256
        }
    },
    "llm-decode-1b-compiled": {
        "experiment": "milabench.models.llm_decode:main",
        "arguments": {
            "--model": "1b",
            "--precision": "bf16",
            "--batch-size": 1,
            "--input-len": 1024,
            "--output-len": 256,
            "--compile": true
        }
    },
    "llm-decode-8b": {
        "experiment": "milabench.models.llm_decode:main",
        "arguments": {
            "--model": "8b",
            "--precision": "bf16",
            "--batch-size": 1,
            "--sweep": "8,32,128",
            "--input-len": 1024,
            "--output-len": 256
        }
    },
    "llm-decode-8b-compiled": {
        "experiment": "milabench.models.llm_decode:main",
        "arguments": {
            "--model": "8b",
            "--precision": "bf16",
            "--batch-size": 1,
            "--input-len": 1024,
            "--output-len": 256,
            "--compile": true
        }
    },
    "llm-serve-8b": {
        "experiment": "milabench.models.llm_serve:main",
        "arguments": {
            "--engine": "transformers",
            "--model": "8b",
            "--precision": "bf16",
            "--input-len": 1024,
            "--output-len": 256,
            "--concurrency": 16,
            "--request-rate": 4
        }
    }
}
