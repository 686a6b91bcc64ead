"""Real launcher and cluster environments, as their launchers write them (one rank's view each).

Each case: the variables (besides what the login shell has), and what the upstream reads from them: the
Lightning cluster environment that takes the process (``lightning.fabric.plugins.environments``), its
global rank, world size, local rank, node rank and main address, and the devices CUDA sees
(``torch.cuda._parse_visible_devices``). Sources: slurmd's ``sbatch``/``srun`` OUTPUT ENVIRONMENT
VARIABLES (CPU and GPU jobs, arrays, heterogeneous jobs), ``torchrun``'s documented variables, Kubeflow's
PyTorchJob operator, IBM LSF ``jsrun``, Open MPI's ``mpirun``, Ray Train, SageMaker and Azure ML.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class EnvCase:
    """One rank's environment and its upstream meaning.

    Attributes:
        name: What launched it.
        env: The variables the launcher set.
        cluster: The Lightning ``ClusterEnvironment`` class name that reads it (``LightningEnvironment``: none
            is detected, Lightning's own default).
        ranks: ``(global_rank, world_size, local_rank, node_rank)`` that environment reports, None when the
            environment is Lightning's default (the launcher lit_gpu starts sets them).
        main_address: The ``main_address`` it reports, None where not read.
        cuda: What CUDA sees: ``None`` every GPU, else the listed ordinals or UUIDs.
        files: Files the environment names (path relative to a temporary folder -> text).
        host: This machine's host name (LSF's node rank is its place among the rank file's hosts).
    """

    name: str
    env: dict[str, str]
    cluster: str
    ranks: tuple[int, int, int, int] | None
    main_address: str | None
    cuda: list[int] | list[str] | None
    files: dict[str, str] = field(default_factory=dict)
    host: str = "localhost"


_SLURM_JOB = {
    "SLURM_JOB_NAME": "train",
    "SLURM_SUBMIT_DIR": "/home/ada/project",
    "SLURM_SUBMIT_HOST": "login01.hpc.example.edu",
    "SLURM_CLUSTER_NAME": "hpc",
    "SLURM_JOB_ACCOUNT": "ml-lab",
    "SLURM_JOB_QOS": "normal",
    "SLURM_JOB_UID": "10234",
    "SLURM_JOB_USER": "ada",
    "SLURM_CPUS_PER_TASK": "8",
    "SLURM_MEM_PER_NODE": "64000",
    "SLURM_STEP_ID": "0",
    "SLURM_STEPID": "0",
    "SLURM_PRIO_PROCESS": "0",
    "SLURM_CONF": "/etc/slurm/slurm.conf",
    "SLURMD_NODENAME": "cn042",
}

SLURM_CPU_JOB = EnvCase(
    "SLURM CPU job on a GPU cluster (slurmd sets CUDA_VISIBLE_DEVICES=NoDevFiles)",
    {
        **_SLURM_JOB,
        "SLURM_JOB_ID": "4242017",
        "SLURM_JOBID": "4242017",
        "SLURM_JOB_PARTITION": "cpu",
        "SLURM_NTASKS": "1",
        "SLURM_NPROCS": "1",
        "SLURM_NNODES": "1",
        "SLURM_JOB_NUM_NODES": "1",
        "SLURM_NODELIST": "cn042",
        "SLURM_JOB_NODELIST": "cn042",
        "SLURM_TASKS_PER_NODE": "1",
        "SLURM_JOB_CPUS_PER_NODE": "8",
        "SLURM_CPUS_ON_NODE": "8",
        "SLURM_PROCID": "0",
        "SLURM_LOCALID": "0",
        "SLURM_NODEID": "0",
        "SLURM_GTIDS": "0",
        "SLURM_TOPOLOGY_ADDR": "cn042",
        "CUDA_VISIBLE_DEVICES": "NoDevFiles",
    },
    "SLURMEnvironment",
    (0, 1, 0, 0),
    "cn042",
    [],
)

SLURM_GPU_JOB = EnvCase(
    "SLURM GPU job, 2 nodes x 4 GPUs, rank 5 (sbatch --nodes 2 --ntasks-per-node 4 --gpus-per-node 4)",
    {
        **_SLURM_JOB,
        "SLURM_JOB_ID": "4242101",
        "SLURM_JOBID": "4242101",
        "SLURM_JOB_PARTITION": "gpu",
        "SLURM_NTASKS": "8",
        "SLURM_NPROCS": "8",
        "SLURM_NTASKS_PER_NODE": "4",
        "SLURM_NNODES": "2",
        "SLURM_JOB_NUM_NODES": "2",
        "SLURM_NODELIST": "gpu-[017-018]",
        "SLURM_JOB_NODELIST": "gpu-[017-018]",
        "SLURM_TASKS_PER_NODE": "4(x2)",
        "SLURM_JOB_CPUS_PER_NODE": "32(x2)",
        "SLURM_PROCID": "5",
        "SLURM_LOCALID": "1",
        "SLURM_NODEID": "1",
        "SLURM_GTIDS": "4,5,6,7",
        "SLURM_GPUS_ON_NODE": "4",
        "SLURM_GPUS_PER_NODE": "4",
        "SLURM_JOB_GPUS": "0,1,2,3",
        "SLURM_STEP_GPUS": "0,1,2,3",
        "GPU_DEVICE_ORDINAL": "0,1,2,3",
        "CUDA_VISIBLE_DEVICES": "0,1,2,3",
    },
    "SLURMEnvironment",
    (5, 8, 1, 1),
    "gpu-017",
    [0, 1, 2, 3],
)

SLURM_ARRAY_TASK = EnvCase(
    "SLURM array task 7 of 0-9 (sbatch --array 0-9 --gpus 1), cgroup-isolated GPU",
    {
        **_SLURM_JOB,
        "SLURM_JOB_ID": "4243008",
        "SLURM_JOBID": "4243008",
        "SLURM_ARRAY_JOB_ID": "4243000",
        "SLURM_ARRAY_TASK_ID": "7",
        "SLURM_ARRAY_TASK_COUNT": "10",
        "SLURM_ARRAY_TASK_MIN": "0",
        "SLURM_ARRAY_TASK_MAX": "9",
        "SLURM_ARRAY_TASK_STEP": "1",
        "SLURM_NTASKS": "1",
        "SLURM_NNODES": "1",
        "SLURM_NODELIST": "gpu-031",
        "SLURM_PROCID": "0",
        "SLURM_LOCALID": "0",
        "SLURM_NODEID": "0",
        "SLURM_JOB_GPUS": "2",
        "CUDA_VISIBLE_DEVICES": "0",
    },
    "SLURMEnvironment",
    (0, 1, 0, 0),
    "gpu-031",
    [0],
)

SLURM_HETERO_JOB = EnvCase(
    "SLURM heterogeneous job, GPU component (sbatch : separated components; srun --het-group=1)",
    {
        **_SLURM_JOB,
        "SLURM_JOB_ID": "4244001",
        "SLURM_JOBID": "4244001",
        "SLURM_HET_SIZE": "2",
        "SLURM_JOB_ID_HET_GROUP_0": "4244000",
        "SLURM_JOB_ID_HET_GROUP_1": "4244001",
        "SLURM_JOB_NODELIST_HET_GROUP_0": "cpu-[01-02]",
        "SLURM_JOB_NODELIST_HET_GROUP_1": "gpu-a100-07",
        "SLURM_JOB_PARTITION_HET_GROUP_1": "gpu",
        "SLURM_NTASKS": "2",
        "SLURM_NNODES": "1",
        "SLURM_NODELIST": "gpu-a100-07",
        "SLURM_JOB_NODELIST": "cpu-[01-02],gpu-a100-07",
        "SLURM_PROCID": "1",
        "SLURM_LOCALID": "1",
        "SLURM_NODEID": "0",
        "SLURM_NTASKS_PER_NODE": "2",
        "CUDA_VISIBLE_DEVICES": "GPU-5a1c2f7e-3b4d-11ee-9c1a-0242ac120002,GPU-77",
    },
    "SLURMEnvironment",
    (1, 2, 1, 0),
    "gpu-a100-07",
    ["GPU-5a1c2f7e-3b4d-11ee-9c1a-0242ac120002", "GPU-77"],
)

SLURM_INTERACTIVE = EnvCase(
    "salloc interactive shell on a MIG slice (Lightning leaves SLURM aside for a job named 'interactive')",
    {
        **_SLURM_JOB,
        "SLURM_JOB_NAME": "interactive",
        "SLURM_JOB_ID": "4245000",
        "SLURM_NTASKS": "1",
        "SLURM_NNODES": "1",
        "SLURM_NODELIST": "gpu-h100-02",
        "SLURM_PROCID": "0",
        "SLURM_LOCALID": "0",
        "SLURM_NODEID": "0",
        "CUDA_VISIBLE_DEVICES": "MIG-4b1f0a3c-9d2e-5f6a-8b7c-1d2e3f4a5b6c",
    },
    "LightningEnvironment",
    None,
    None,
    ["MIG-4b1f0a3c-9d2e-5f6a-8b7c-1d2e3f4a5b6c"],
)

TORCHRUN = EnvCase(
    "torchrun --nnodes 2 --nproc-per-node 4, rank 6 (FQDN rendezvous host)",
    {
        "RANK": "6",
        "LOCAL_RANK": "2",
        "WORLD_SIZE": "8",
        "LOCAL_WORLD_SIZE": "4",
        "GROUP_RANK": "1",
        "GROUP_WORLD_SIZE": "2",
        "ROLE_RANK": "6",
        "ROLE_NAME": "default",
        "ROLE_WORLD_SIZE": "8",
        "MASTER_ADDR": "node-01.cluster.example.org",
        "MASTER_PORT": "29500",
        "TORCHELASTIC_RESTART_COUNT": "0",
        "TORCHELASTIC_MAX_RESTARTS": "0",
        "TORCHELASTIC_RUN_ID": "ddp-run-7f3c",
        "TORCHELASTIC_USE_AGENT_STORE": "True",
        "TORCHELASTIC_ERROR_FILE": "/tmp/torchelastic_abc/none_x/attempt_0/6/error.json",
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1",
        "OMP_NUM_THREADS": "1",
        "CUDA_VISIBLE_DEVICES": "0,1,2,3,",  # a launcher script's $(nvidia-smi ... | tr '\n' ',')
    },
    "TorchElasticEnvironment",
    (6, 8, 2, 1),
    "node-01.cluster.example.org",
    [0, 1, 2, 3],
)

TORCHRUN_IPV6 = EnvCase(
    "torchrun on one node, IPv6 rendezvous address with its zone",
    {
        "RANK": "0",
        "LOCAL_RANK": "0",
        "WORLD_SIZE": "2",
        "LOCAL_WORLD_SIZE": "2",
        "GROUP_RANK": "0",
        "MASTER_ADDR": "fe80::1ff:fe23:4567:890a%eth0",
        "MASTER_PORT": "29400",
        "TORCHELASTIC_RUN_ID": "none",
    },
    "TorchElasticEnvironment",
    (0, 2, 0, 0),
    "fe80::1ff:fe23:4567:890a%eth0",
    None,
)

KUBEFLOW = EnvCase(
    "Kubeflow PyTorchJob, worker 1 (1 master + 2 workers; the operator sets MASTER_*, WORLD_SIZE, RANK)",
    {
        "MASTER_ADDR": "mnist-ddp-master-0",
        "MASTER_PORT": "23456",
        "WORLD_SIZE": "3",
        "RANK": "2",
        "PYTHONUNBUFFERED": "0",
        "KUBERNETES_SERVICE_HOST": "10.96.0.1",
        "KUBERNETES_SERVICE_PORT": "443",
        "KUBERNETES_PORT": "tcp://10.96.0.1:443",
        "PET_NNODES": "1:3",  # the elastic policy's min:max
        "PET_NPROC_PER_NODE": "auto",
        "NVIDIA_VISIBLE_DEVICES": "all",
        "CUDA_VISIBLE_DEVICES": "GPU-1f2e3d4c-5b6a-7980-a1b2-c3d4e5f60718",
    },
    "KubeflowEnvironment",
    (2, 3, 0, 2),
    "mnist-ddp-master-0",
    ["GPU-1f2e3d4c-5b6a-7980-a1b2-c3d4e5f60718"],
)

LSF_JSRUN = EnvCase(
    "IBM LSF jsrun, 2 nodes x 6 GPUs, rank 7 (Summit-style)",
    {
        "LSB_JOBID": "1234567",
        "LSB_JOBNAME": "train",
        "LSB_DJOB_RANKFILE": "{tmp}/rankfile",
        "LSB_HOSTS": "batch1 h41n04 h41n04 h41n05 h41n05",
        "LSB_MCPU_HOSTS": "batch1 1 h41n04 42 h41n05 42",
        "JSM_NAMESPACE_RANK": "7",
        "JSM_NAMESPACE_SIZE": "12",
        "JSM_NAMESPACE_LOCAL_RANK": "1",
        "JSM_NAMESPACE_LOCAL_SIZE": "6",
        "OMPI_COMM_WORLD_RANK": "7",
        "OMPI_COMM_WORLD_SIZE": "12",
        "OMPI_COMM_WORLD_LOCAL_RANK": "1",
        "PMIX_RANK": "7",
        "CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5",
    },
    "LSFEnvironment",
    (7, 12, 1, 1),  # node rank: this host (h41n05) in the rank file's compute hosts
    "h41n04",
    [0, 1, 2, 3, 4, 5],
    {"rankfile": "batch1\nh41n04\nh41n04\nh41n05\nh41n05\n"},
    "h41n05",
)

OPEN_MPI = EnvCase(
    "Open MPI mpirun -np 4, rank 3 (without mpi4py Lightning's own environment takes it)",
    {
        "OMPI_COMM_WORLD_RANK": "3",
        "OMPI_COMM_WORLD_SIZE": "4",
        "OMPI_COMM_WORLD_LOCAL_RANK": "3",
        "OMPI_COMM_WORLD_LOCAL_SIZE": "4",
        "OMPI_COMM_WORLD_NODE_RANK": "0",
        "OMPI_UNIVERSE_SIZE": "4",
        "OMPI_MCA_orte_hnp_uri": "3046375424.0;tcp://10.0.0.5:41237",
        "PMIX_RANK": "3",
        "PMIX_NAMESPACE": "prterun-node01-12345@1",
        "MASTER_ADDR": "10.0.0.5",
        "MASTER_PORT": "29500",
        "CUDA_VISIBLE_DEVICES": "3",
    },
    "LightningEnvironment",
    None,
    None,
    [3],
)

RAY_TRAIN = EnvCase(
    "Ray Train TorchTrainer worker 3 of 4 (2 nodes x 2 GPUs; Ray sets the torch variables, no torchrun)",
    {
        "RANK": "3",
        "LOCAL_RANK": "1",
        "WORLD_SIZE": "4",
        "LOCAL_WORLD_SIZE": "2",
        "NODE_RANK": "1",
        "MASTER_ADDR": "10.42.3.17",
        "MASTER_PORT": "51327",
        "RAY_ADDRESS": "10.42.3.17:6379",
        "RAY_NODE_ID": "f1c2b7d9e0a34c5b8a0e6c2f3d4b5a6978695a4b3c2d1e0f",
        "CUDA_VISIBLE_DEVICES": "2,3",  # Ray's GPU ids for this node's workers
    },
    "LightningEnvironment",
    None,
    None,
    [2, 3],
)

SAGEMAKER = EnvCase(
    "SageMaker training job, torch_distributed (torchrun on algo-2 of 2, 8 GPUs each), rank 9",
    {
        "SM_HOSTS": '["algo-1","algo-2"]',
        "SM_CURRENT_HOST": "algo-2",
        "SM_NUM_GPUS": "8",
        "SM_HPS": '{{"epochs": 2, "lr": 1e-3}}',  # values are str.format()ed ({tmp})
        "SM_MODEL_DIR": "/opt/ml/model",
        "SM_CHANNEL_TRAINING": "/opt/ml/input/data/training",
        "SM_TRAINING_ENV": '{{"hosts": ["algo-1", "algo-2"], "current_host": "algo-2"}}',
        "RANK": "9",
        "LOCAL_RANK": "1",
        "WORLD_SIZE": "16",
        "LOCAL_WORLD_SIZE": "8",
        "GROUP_RANK": "1",
        "MASTER_ADDR": "algo-1",
        "MASTER_PORT": "7777",
        "TORCHELASTIC_RUN_ID": "sagemaker-job-2026-11-28-18-00-00-123",
    },
    "TorchElasticEnvironment",
    (9, 16, 1, 1),
    "algo-1",
    None,
)

AZUREML = EnvCase(
    "Azure ML PyTorch command job, node 1 of 2, process 0 (the service sets the torch variables per process)",
    {
        "AZ_BATCH_MASTER_NODE": "10.0.0.4:6105",
        "AZ_BATCHAI_MPI_MASTER_NODE": "10.0.0.4",
        "AZUREML_NODE_COUNT": "2",
        "AZUREML_RUN_ID": "frosty_lamp_1x2y3z",
        "MASTER_ADDR": "10.0.0.4",
        "MASTER_PORT": "6105",
        "NODE_RANK": "1",
        "RANK": "2",
        "LOCAL_RANK": "0",
        "WORLD_SIZE": "4",
        "LOCAL_WORLD_SIZE": "2",
        "CUDA_VISIBLE_DEVICES": "0,1",
    },
    "LightningEnvironment",
    None,
    None,
    [0, 1],
)

CASES = [
    SLURM_CPU_JOB,
    SLURM_GPU_JOB,
    SLURM_ARRAY_TASK,
    SLURM_HETERO_JOB,
    SLURM_INTERACTIVE,
    TORCHRUN,
    TORCHRUN_IPV6,
    KUBEFLOW,
    LSF_JSRUN,
    OPEN_MPI,
    RAY_TRAIN,
    SAGEMAKER,
    AZUREML,
]
