"""The paper's prompt tables as printed (RuleRAG arXiv version, Appendix A.9), one string per
table row, typos included. `tests/data/test_paper_texts.py` checks that they are the paper's
text; `tests/unit/test_prompts.py` renders them from their parts."""

# ruff: noqa: E501

#: Table 8, the RGFT instruction prompt for RuleQA-I.
TABLE8 = (
    "# Instruct: For the query in the form of “Time {time} what does {subject} {relation} ?”, we provide a collection of text consisting of multiple documents in the form of “Time {time} {subject} {relation} {object}.” Your response should directly generate the missing {object}.",
    "# Retrieved documents: Documents related to the Query. Time 2014-06-23 Abdullah Abdullah Expel or withdraw peacekeepers Election Commission (Afghanistan). Time 2014-02-20 Abdullah Abdullah Make a visit Afghanistan. Time 2014-07-16 Abdullah Abdullah Make a visit Ashraf Ghani Ahmadzai. Time 2014-09-20 Abdullah Abdullah Make a visit Foreign Affairs (United States).",
    "# Rules: Use the following Two rules to answer the given Query. Rule One: [Entity1, Abduct, hijack, or take hostage, Entity2] leads to [Entity1, Make a visit, Entity2]. Rule Two: [Entity1, Make a visit, Entity2] leads to [Entity1, Make a visit, Entity2].",
    "# Query: Time 2014-12-01 what does Abdullah Abdullah Make a visit ?",
    "# Answer: Afghanistan.",
)

#: Table 10, the 3-shot prompt for closed models (GPT-3.5-Turbo) on RuleQA-I.
TABLE10 = (
    "Answer the Final Query by referring to the three cases below.",
    "Case 1:",
    "# Instruct: For the query in the form of “Time {time} what does {subject} {relation} ?”, we provide a collection of text consisting of multiple documents in the form of “Time {time} {subject} {relation} {object}.” Your response should directly generate the missing {object}.",
    "# Retrieved documents: Documents related to the Query. Time 2014-06-23 Abdullah Abdullah Expel or withdraw peacekeepers Election Commission (Afghanistan). Time 2014-02-20 Abdullah Abdullah Make a visit Afghanistan. Time 2014-07-16 Abdullah Abdullah Make a visit Ashraf Ghani Ahmadzai. Time 2014-09-20 Abdullah Abdullah Make a visit Foreign Affairs (United States).",
    "# Rules: Use the following Two rules to answer the given Query. Rule One: [Entity1, Abduct, hijack, or take hostage, Entity2] leads to [Entity1, Make a visit, Entity2]. Rule Two: [Entity1, Make a visit, Entity2] leads to [Entity1, Make a visit, Entity2].",
    "# Query: Time 2014-12-01 what does Abdullah Abdullah Make a visit ?",
    "# Answer: Afghanistan.",
    "Case 2:",
    "# Instruct: For the query in the form of “Time {time} what does {subject} {relation} ?”, we provide a collection of text consisting of multiple documents in the form of “Time {time} {subject} {relation} {object}.” Your response should directly generate the missing {object}.",
    "# Retrieved documents: Documents related to the Query. Time 2014-04-07 Adams Oshiomhole Make an appeal or request Citizen (Benin). Time 2014-10-13 Adams Oshiomhole Accuse People’s Democratic Party (Benin). Time 2014-07-02 Adams Oshiomhole Criticize or denounce Citizen (Nigeria). Time 2014-08-05 Adams Oshiomhole Praise or endorse Labor Union (Nigeria).",
    "# Rules: Use the following Three rules to answer the given Question. Rule One: [Entity1, Make an appeal or request, Entity2] leads to [Entity1, Make an appeal or request, Entity2]. Rule Two: [Entity1, Appeal for economic aid, Entity2] leads to [Entity1, Make an appeal or request, Entity2]. Rule Three: [Entity1, Accuse of aggression , Entity2] leads to [Entity1, Make an appeal or request, Entity2].",
    "# Query: Time 2014-12-01 what does Adams Oshiomhole Make an appeal or request ?",
    "# Answer: Citizen (Nigeria).",
    "Case 3:",
    "# Instruct: For the query in the form of “Time {time} what does {subject} {relation} ?”, we provide a collection of text consisting of multiple documents in the form of “Time {time} {subject} {relation} {object}.” Your response should directly generate the missing {object}.",
    "# Retrieved documents: Documents related to the Query. Time 2014-09-25 Adams Oshiomhole Demand Citizen (Benin). Time 2014-02-05 Adams Oshiomhole Express intent to cooperate Citizen (Nigeria). Time 2014-10-13 Adams Oshiomhole Make an appeal or request Other Authorities / Officials (Nigeria). Time 2014-07-01 Adams Oshiomhole Praise or endorse Media (Africa).",
    "# Rules: Use the following Three rules to answer the given Question. Rule One: [Entity1, Obstruct passage, block, Entity2] leads to [Entity1, Praise or endorse, Entity2]. Rule Two: [Entity1, Expel or deport individuals, Entity2] leads to [Entity1, Praise or endorse, Entity2]. Rule Three: [Entity1, Praise or endorse , Entity2] leads to [Entity1, Praise or endorse, Entity2].",
    "# Query: Time 2014-12-01 what does Adams Oshiomhole Praise or endorse ?",
    "# Answer: Media (Africa).",
    "Final Query:",
    "# Instruct: For the query in the form of “Time {time} what does {subject} {relation} ?”, we provide a collection of text consisting of multiple documents in the form of “Time {time} {subject} {relation} {object}.” Your response should directly generate the missing {object} # Retrieved documents: Documents related to the Query. Time 2014-03-11 Alexis Tsipras Make a visit Ireland. Time 2014-02-26 Alexis Tsipras Express intent to meet or negotiate Slovenia. Time 2014-05-26 Alexis Tsipras Make a visit Head of Government (Greece). Time 2014-09-17 Alexis Tsipras Consult New Democracy.",
    "# Rules: Use the following Three rules to answer the given Question. Rule One: [Entity1, Accede to demands for change in leadership, Entity2] leads to [Entity1, Make statement, Entity2]. Rule Two: [Entity1, Demand release of persons or property, Entity2] leads to [Entity1, Make statement, Entity2]. Rule Three: [Entity1, Accuse of crime, corruption , Entity2] leads to [Entity1, Make statement, Entity2].",
    "# Query: Time 2014-12-01 what does Alexis Tsipras Make statement ?",
    "# Answer:",
)

#: Where Table 10 departs from Table 8's template, which the pipeline renders everywhere: cases
#: 2, 3 and the final query say "Question" where Table 8 (and case 1) say "Query", three rule
#: texts have a space before a comma, and the final query's instruction lost its full stop.
TABLE10_TYPOS = (
    ("answer the given Question.", "answer the given Query."),
    (" , Entity2]", ", Entity2]"),
    ("generate the missing {object} # Retrieved", "generate the missing {object}. # Retrieved"),
)
