"""Reaction SMILES: the input of rxnmapper's ALBERT (offline).
"""

from __future__ import annotations

import numpy as np


# curated dataset (no stereochemistry, few reagents).
REACTIONS = (
    "CC(=O)O.CCO>>CCOC(C)=O",  # Fischer esterification
    "CC(=O)Cl.NCc1ccccc1>>CC(=O)NCc1ccccc1",  # amide from an acid chloride
    "O=C(O)c1ccccc1.CO>>COC(=O)c1ccccc1",  # methyl benzoate
    "c1ccccc1.O=[N+]([O-])O>>O=[N+]([O-])c1ccccc1",  # nitration
    "O=[N+]([O-])c1ccccc1.[H][H]>>Nc1ccccc1",  # nitro reduction
    "O=Cc1ccccc1.[BH4-].[Na+]>>OCc1ccccc1",  # aldehyde reduction
    "Brc1ccccc1.OB(O)c1ccccc1>>c1ccc(-c2ccccc2)cc1",  # Suzuki coupling
    "CC[O-].[Na+].CI>>CCOC",  # Williamson ether synthesis
    "CC(C)(C)OC(=O)OC(=O)OC(C)(C)C.NCCO>>CC(C)(C)OC(=O)NCCO",  # Boc protection
    "CC(C)(C)OC(=O)NCc1ccccc1.O=C(O)C(F)(F)F>>NCc1ccccc1",  # Boc removal
    "CC(=O)OC(C)=O.Nc1ccccc1>>CC(=O)Nc1ccccc1",  # acetylation of aniline
    "CCOC(=O)c1ccccc1.[Na+].[OH-]>>O=C(O)c1ccccc1",  # ester hydrolysis
    "C[Mg]Br.O=C1CCCCC1>>CC1(O)CCCCC1",  # Grignard addition
    "O=Cc1ccccc1.CN.[BH3-]C#N.[Na+]>>CNCc1ccccc1",  # reductive amination
    "Oc1ccccc1.BrBr>>Oc1ccc(Br)cc1",  # bromination of phenol
    "c1ccccc1.CC(=O)Cl.Cl[Al](Cl)Cl>>CC(=O)c1ccccc1",  # Friedel-Crafts acylation
    "C=CC=C.C=CC(=O)OC>>COC(=O)C1CC=CCC1",  # Diels-Alder
    "C=Cc1ccccc1.[H][H]>>CCc1ccccc1",  # hydrogenation
    "CS(=O)(=O)Cl.OCCc1ccccc1.CCN(CC)CC>>CS(=O)(=O)OCCc1ccccc1",  # mesylation
    "O=[N+]([O-])c1ccc(F)cc1.C1CCNCC1>>O=[N+]([O-])c1ccc(N2CCCCC2)cc1",  # nucleophilic aromatic substitution
    "Brc1ccc(C)cc1.C1COCCN1>>Cc1ccc(N2CCOCC2)cc1",  # Buchwald-Hartwig amination
    "Ic1ccccc1.C#Cc1ccccc1>>c1ccc(C#Cc2ccccc2)cc1",  # Sonogashira coupling
    "O=Cc1ccccc1.C=P(c1ccccc1)(c1ccccc1)c1ccccc1>>C=Cc1ccccc1",  # Wittig
    "O=C(O)c1ccncc1.NC1CC1>>O=C(NC1CC1)c1ccncc1",  # amide coupling
    "Cc1ccc(S(=O)(=O)Cl)cc1.NCc1ccccc1>>Cc1ccc(S(=O)(=O)NCc2ccccc2)cc1",  # sulfonamide
    "Oc1ccc(Cl)cc1.CI.O=C([O-])[O-].[K+].[K+]>>COc1ccc(Cl)cc1",  # O-methylation of a phenol
    "N#Cc1ccccc1.O>>NC(=O)c1ccccc1",  # nitrile hydration
    "CCOC(=O)CCc1ccccc1.[Li+].[AlH4-]>>OCCCc1ccccc1",  # ester reduction
    "O=C=Nc1ccccc1.NCC>>CCNC(=O)Nc1ccccc1",  # urea from an isocyanate
    "CC(C)=O.O=Cc1ccccc1>>CC(=O)/C=C/c1ccccc1",  # aldol condensation
    "O=C(O)c1ccc(Cl)cc1.O=S(Cl)Cl>>O=C(Cl)c1ccc(Cl)cc1",  # acid chloride with thionyl chloride
    "O=C(NCCc1ccccc1)OCc1ccccc1.[H][H]>>NCCc1ccccc1",  # Cbz removal
    "BrCc1ccccc1.C1CCNC1>>c1ccc(CN2CCCC2)cc1",  # N-alkylation
    "C=Cc1ccccc1.O=C(OO)c1cccc(Cl)c1>>c1ccc(C2CO2)cc1",  # epoxidation
    "CC(C)S.CN(C)C=O.Fc1cccnc1F.O=C([O-])[O-].[K+].[K+]>>CC(C)Sc1ncccc1F",  # rxnmapper's README example
    "C1COCCO1.CC(C)(C)OC(=O)CONC(=O)NCc1cccc2ccccc12.Cl>>O=C(O)CONC(=O)NCc1cccc2ccccc12",  # rxnmapper's README
)


def reaction_smiles(n: int, seed: int = 0) -> list[str]:
    """``n`` of the ``REACTIONS`` (reaction SMILES), drawn without replacement by ``seed`` (all of them, in a seeded
    order, for n >= 36)."""
    order = np.random.default_rng(seed).permutation(len(REACTIONS))
    return [REACTIONS[i] for i in order[:n]]
